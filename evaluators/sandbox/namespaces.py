"""Linux namespaces entered by system call: what ``unshare --pid --net --ipc --mount --fork
--kill-child --mount-proc`` (and ``--user --map-root-user``) does, for a runner forked from the
runner template (evaluators/runner/template.py) instead of started through the ``unshare``
command.

``enter(names)`` is called by a freshly forked, single-threaded process: it moves that process
into new network, IPC, mount (and user) namespaces and makes the next process it forks pid 1 of
a new PID namespace; ``inside_pid_namespace()`` is what that next process does first (a /proc of
its own namespace). The kernel's rules that shape this: a process cannot move itself into a new
PID namespace, only its children; ``CLONE_NEWUSER`` needs a single-threaded caller; a user
namespace's id maps are written once, by the process that created it.
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Iterable

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
FLAGS = {"mount": CLONE_NEWNS, "ipc": CLONE_NEWIPC, "user": CLONE_NEWUSER, "pid": CLONE_NEWPID,
         "net": CLONE_NEWNET}

MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
MS_REC, MS_PRIVATE = 16384, 1 << 18
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def libc() -> ctypes.CDLL:
    """The C library, with ``mount``'s argument types declared and errno kept."""
    found = ctypes.CDLL(None, use_errno=True)
    found.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                            ctypes.c_char_p]
    return found


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int,
          data: str | None = None) -> None:
    def enc(text: str | None) -> bytes | None:
        return None if text is None else os.fsencode(text)

    _check(libc().mount(enc(source), enc(target), enc(fstype), flags, enc(data)),
           f"mount {target}")


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """``sig`` to this process when its parent ends (checked against a parent already gone)."""
    parent = os.getppid()
    _check(libc().prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:
        os._exit(1)


def adopt_orphans() -> None:
    """This process reaps its descendants whose parents died (a child subreaper)."""
    _check(libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(PR_SET_CHILD_SUBREAPER)")


def enter(names: Iterable[str]) -> None:
    """Unshare the namespaces ``names`` (of FLAGS) for the calling, single-threaded process; with
    "user", map its user and group to root inside; with "mount", stop mount events propagating
    back. "pid" applies to the children it forks next."""
    names = set(names)
    unknown = names - set(FLAGS)
    if unknown:
        raise ValueError(f"unknown namespaces: {sorted(unknown)}")
    uid, gid = os.getuid(), os.getgid()
    flags = 0
    for name in names:
        flags |= FLAGS[name]
    _check(libc().unshare(flags), f"unshare({','.join(sorted(names))})")
    if "user" in names:
        with open("/proc/self/setgroups", "w") as setgroups:
            setgroups.write("deny")
        with open("/proc/self/uid_map", "w") as uid_map:
            uid_map.write(f"0 {uid} 1")
        with open("/proc/self/gid_map", "w") as gid_map:
            gid_map.write(f"0 {gid} 1")
    if "mount" in names:
        mount("none", "/", None, MS_REC | MS_PRIVATE)


def inside_pid_namespace(own_proc: bool) -> None:
    """First steps of a new PID namespace's pid 1: end with its parent (the process that made the
    namespace) and, with ``own_proc`` (only in a new mount namespace: the mount would otherwise
    cover everyone's /proc), a /proc that shows this namespace."""
    die_with_parent()
    if own_proc:
        mount("none", "/proc", None, MS_REC | MS_PRIVATE)
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NOEXEC | MS_NODEV)


def exit_as(status: int) -> None:
    """End this process the way a child with wait status ``status`` ended: the same exit code,
    or the same signal (so that whoever waits for this process reads what the child did)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal that does not end a process by default
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)
