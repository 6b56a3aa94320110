"""Operating-system isolation of the process that runs candidate code (the runner).

Two halves, one on each side of the runner's start:

- ``isolated_command(argv, scratch)`` (in the judge): the command line and ``Popen`` options
  that start the runner in its own session and, where the platform allows, in new PID, network,
  IPC and mount namespaces (through util-linux ``unshare``). What works is probed once per
  process and cached.
- ``enter_isolation(scratch)`` (in the runner, after torch, the device, the task and the starting
  kernel are set up and before any candidate code is loaded): makes the file system read-only
  except the scratch folder, gives the runner a private ``/tmp`` and ``/dev/shm``, hides the
  folders it is asked to hide, confines writes to scratch with Landlock (evaluators/sandbox/landlock.py),
  closes inherited sockets, sets resource limits, drops capabilities and installs the seccomp
  filter (evaluators/sandbox/seccomp.py). It returns the level reached, for ``Evaluation.metrics``.
- ``forbid_processes()`` (in the runner, only after ``enter_isolation(allow_processes=True)``):
  closes a compile window in which a JIT could still run ``ptxas`` or a C compiler (triton on a
  GPU compiles at a kernel's first call), and names what the window left running.

Levels, per platform:

========================================  ==========================================================
platform                                  what the runner gets
========================================  ==========================================================
Linux as root (containers, as in CI)      ``unshare --pid --net --ipc --mount``: it is pid 1 of
                                          its own PID namespace (cannot see or signal the judge;
                                          everything it could start dies with it), has only a
                                          down loopback, a read-only file system but for scratch,
                                          private /tmp and /dev/shm, no capabilities (on the
                                          thread that loads the candidate) and the seccomp filter.
                                          Where the container forbids ``unshare`` (Docker's
                                          default profile), as the next row but one.
Linux, unprivileged user namespaces       the same through ``unshare --user --map-root-user``;
                                          "root" only inside its own user namespace.
Linux without either                      its own session and the seccomp filter: no fork, exec,
                                          sockets, ptrace, or signals to other processes; writes
                                          only beneath scratch and no ptrace-level /proc access to
                                          the judge (Landlock, Linux 5.13+); files stay readable.
other systems                             its own session only; the report says so.
========================================  ==========================================================

The runner is pid 1 of its namespace when it has one: a signal it sends itself without a handler
installed is ignored (the kernel protects a namespace's init), hardware faults still kill it, and
``abort()`` ends as SIGSEGV. Nothing here can stop a candidate from corrupting the runner's own
memory: the verdict must be computed outside the runner.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import resource
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .landlock import LandlockUnavailable, restrict_writes
from .namespaces import libc as _libc
from .namespaces import mount as _mount
from .seccomp import SeccompUnavailable, install_filter

ISOLATION_ENV = "KERNELSWARM_ISOLATION"  # "<namespaces>;<judge's mount namespace>"
NAMESPACES = ("pid", "net", "ipc", "mount")
_UNSHARE_FLAGS = ("--pid", "--net", "--ipc", "--mount", "--fork", "--kill-child", "--mount-proc")
_PROBE_TIMEOUT_S = 10.0

TMP_SIZE = "256m"  # the private /tmp and /dev/shm: memory-backed, so bounded
FILE_SIZE_LIMIT = 1 << 30  # RLIMIT_FSIZE: the largest file the runner may write

_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_NOATIME, _MS_NODIRATIME, _MS_BIND = 32, 1024, 2048, 4096
_MS_REC, _MS_PRIVATE, _MS_RELATIME = 16384, 1 << 18, 1 << 21
# statvfs f_flag bits that a remount must keep (a user namespace may not clear them); Linux's
# names, absent elsewhere (where nothing is remounted)
_KEPT_FLAGS = tuple((getattr(os, name, 0), flag) for name, flag in (
    ("ST_NOSUID", _MS_NOSUID), ("ST_NODEV", _MS_NODEV), ("ST_NOEXEC", _MS_NOEXEC),
    ("ST_NOATIME", _MS_NOATIME), ("ST_NODIRATIME", _MS_NODIRATIME),
    ("ST_RELATIME", _MS_RELATIME)))
_PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
_CAPABILITY_VERSION_3 = 0x20080522


@dataclass(frozen=True)
class Launcher:
    """How runners start here: a command prefix and the namespaces it creates."""

    prefix: tuple[str, ...]
    namespaces: tuple[str, ...]
    note: str  # how it works, or why there is none (what was tried and refused)


def candidate_launchers() -> list[Launcher]:
    """The namespace launchers to try, strongest first: as root (or with CAP_SYS_ADMIN), then
    through an unprivileged user namespace. Empty where ``unshare`` is missing."""
    unshare = shutil.which("unshare")
    if not sys.platform.startswith("linux") or unshare is None:
        return []
    return [Launcher((unshare, *_UNSHARE_FLAGS), NAMESPACES, "as root"),
            Launcher((unshare, "--user", "--map-root-user", *_UNSHARE_FLAGS),
                     (*NAMESPACES, "user"), "in a user namespace")]


def probe(found: Launcher) -> str:
    """Why ``found`` cannot start a process here, or "" when it can."""
    true = shutil.which("true")
    if true is None:
        return "no `true` to probe with"
    try:
        run = subprocess.run([*found.prefix, "--", true], stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    if run.returncode == 0:
        return ""
    return (run.stderr.strip().splitlines()[-1:] or [f"status {run.returncode}"])[0]


@functools.cache
def launcher() -> Launcher:
    """The strongest namespace launcher this machine allows (probed once per process)."""
    if not sys.platform.startswith("linux"):
        return Launcher((), (), f"no namespaces on {sys.platform}")
    refusals = []
    for found in candidate_launchers():
        refused = probe(found)
        if not refused:
            return found
        refusals.append(f"{found.note}: {refused}")
    if not refusals:
        return Launcher((), (), "util-linux `unshare` is not installed")
    return Launcher((), (), "unshare refused: " + "; ".join(refusals))


def _mount_namespace() -> str:
    return os.readlink("/proc/self/ns/mnt") if os.path.exists("/proc/self/ns/mnt") else ""


def isolated_command(argv: Sequence[str], scratch: Path) -> tuple[list[str], dict[str, Any]]:
    """The runner's command line and extra ``subprocess.Popen`` options.

    ``argv`` starts the runner (``[sys.executable, "-m", ...]``); ``scratch`` is its working
    folder, the only one it will be able to write. The options put the runner in a new session,
    so that killing its process group kills all it started; merge them into your own.
    """
    if not Path(scratch).is_dir():
        raise ValueError(f"the runner's scratch folder {scratch} does not exist")
    return launch_command(launcher(), argv), {"start_new_session": True}


def launch_command(found: Launcher, argv: Sequence[str]) -> list[str]:
    """``argv`` started through ``found``, with the marker that tells the runner what it got."""
    env = shutil.which("env")
    if not found.prefix or env is None:
        return list(argv)
    return [*found.prefix, "--", env, f"{ISOLATION_ENV}={isolation_marker(found.namespaces)}",
            *argv]


def isolation_marker(namespaces: Sequence[str]) -> str:
    """The value of ``ISOLATION_ENV`` for a runner started in ``namespaces``: what the runner
    verifies it got, and the judge's mount namespace (never to be remounted)."""
    return f"{','.join(namespaces)};{_mount_namespace()}"


def _launched_namespaces() -> tuple[set[str], str]:
    """The namespaces ``isolated_command`` created, as its marker says, and the judge's mount
    namespace (to refuse remounting the judge's own file system)."""
    marker = os.environ.pop(ISOLATION_ENV, "")
    names, _, judge_mounts = marker.partition(";")
    return {n for n in names.split(",") if n}, judge_mounts


def _verified_namespaces(claimed: set[str], judge_mounts: str) -> list[str]:
    """The namespaces this process really has: pid 1, only a loopback, another mount table."""
    found = []
    if "pid" in claimed and os.getpid() == 1:
        found.append("pid")
    if "net" in claimed and _interfaces() == ["lo"]:
        found.append("net")
    if "ipc" in claimed:
        found.append("ipc")  # nothing observable from inside tells a fresh one apart
    if "mount" in claimed and judge_mounts and _mount_namespace() != judge_mounts:
        found.append("mount")
    if "user" in claimed:
        found.append("user")
    return found


def _interfaces() -> list[str]:
    try:
        lines = Path("/proc/self/net/dev").read_text().splitlines()[2:]
    except OSError:
        return []
    return sorted(line.split(":", 1)[0].strip() for line in lines)


_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


def _mount_points() -> list[str]:
    """Every mount point of this namespace, outermost first (mountinfo escapes spaces as octal)."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        points.append(_OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), line.split()[4]))
    return points


def _remount_read_only(point: str) -> None:
    flags = os.statvfs(point).f_flag
    kept = sum(ms for st, ms in _KEPT_FLAGS if flags & st)
    _mount(None, point, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | kept)


def _imported_from_private(private: Iterable[str]) -> list[str]:
    """The folders this process imports from (its Python environment, kernelswarm, sys.path)
    that lie under a folder about to be made private, outermost only: a virtual environment or
    a checkout under /tmp must stay visible, read-only, to the imports still to come."""
    roots = {sys.prefix, sys.base_prefix, str(Path(__file__).resolve().parents[2]), *sys.path}
    under = sorted({os.path.realpath(r) for r in roots if r and os.path.isdir(r)
                    and any(os.path.realpath(r).startswith(p.rstrip("/") + "/")
                            for p in private)})
    return [r for r in under if not any(r.startswith(o + "/") for o in under if o != r)]


def _private_file_system(scratch: Path, hidden: Iterable[Path]) -> list[str]:
    """Read-only everything, private /tmp and /dev/shm, ``scratch`` writable, ``hidden`` empty.

    Returns the mount points that could not be made read-only (empty when all were).
    """
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)  # nothing propagates back to the judge
    # Scratch may lie under /tmp or a hidden folder: held open, it is bound back in afterwards.
    held = os.open(scratch, os.O_PATH | os.O_DIRECTORY)
    private = [p for p in ("/tmp", "/dev/shm") if os.path.isdir(p)]
    # What the runner imports from under /tmp is bound back (before the hidden folders are
    # emptied, so a hidden folder inside it stays hidden) and made read-only below.
    imported = {path: os.open(path, os.O_PATH | os.O_DIRECTORY)
                for path in _imported_from_private(private)}
    try:
        for point in private:
            _mount("tmpfs", point, "tmpfs", _MS_NOSUID | _MS_NODEV,
                   f"mode=1777,size={TMP_SIZE}")
        for path, fd in imported.items():
            os.makedirs(path, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC)
        for folder in hidden:  # emptied; made read-only with everything else below
            if Path(folder).is_dir():
                _mount("tmpfs", str(folder), "tmpfs", _MS_NOSUID | _MS_NODEV,
                       "mode=0555,size=64k")
        os.makedirs(scratch, exist_ok=True)
        _mount(f"/proc/self/fd/{held}", str(scratch), None, _MS_BIND | _MS_REC)
        _mount(None, str(scratch), None, _MS_REMOUNT | _MS_BIND | _MS_NOSUID | _MS_NODEV)
    finally:
        os.close(held)
        for fd in imported.values():
            os.close(fd)
    writable = {str(scratch), *private}
    refused = []
    for point in _mount_points():
        if point in writable:
            continue
        try:
            _remount_read_only(point)
        except OSError as exc:
            refused.append(f"{point} ({exc.strerror})")
    os.chdir(scratch)  # the old working directory is on the now read-only mount
    return refused


def _close_inherited_sockets(keep: Iterable[int]) -> int:
    """Close every socket descriptor but ``keep`` (a runner inherits none it needs)."""
    keep = set(keep)
    closed = 0
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd in keep:
            continue
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                os.close(fd)
                closed += 1
        except OSError:
            pass  # the descriptor of the listing itself, already closed
    return closed


def _set_limits() -> str:
    """No core files (they could fill scratch), bounded files, no message queues; what was set.

    Not RLIMIT_NPROC: it counts threads and every process of the user, and root is exempt; the
    seccomp filter denies new processes instead."""
    done = []
    for name, limit, value in (("core", resource.RLIMIT_CORE, 0),
                               ("fsize", resource.RLIMIT_FSIZE, FILE_SIZE_LIMIT),
                               ("msgqueue", resource.RLIMIT_MSGQUEUE, 0)):
        try:
            _, hard = resource.getrlimit(limit)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(limit, (value, value))
            done.append(f"{name}={value}")
        except (OSError, ValueError) as exc:
            done.append(f"{name} unchanged ({exc})")
    return ", ".join(done)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def _drop_capabilities() -> None:
    """Empty the bounding, ambient, effective and permitted sets of the calling thread."""
    libc = _libc()
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    for cap in range(last + 1):
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)  # fails without CAP_SETPCAP: nothing to drop
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"capset: {os.strerror(code)}")


def enter_isolation(scratch: Path, *, hidden: Sequence[Path] = (),
                    keep_fds: Iterable[int] = (), allow_processes: bool = False
                    ) -> dict[str, str]:
    """Apply, from inside the runner, what only the runner can apply; return the level reached.

    Call it after torch, the device, the task and the starting kernel are set up (and after
    opening any shared memory or file the runner needs: /tmp and /dev/shm are replaced) and
    before any candidate code is loaded. ``hidden`` folders (the run folder, ...) become empty;
    ``keep_fds`` are sockets the runner must keep. Once it returns, this process can no longer
    start processes, open sockets or signal other processes.

    ``allow_processes`` opens a compile window (a JIT that runs ``ptxas`` or a C compiler at
    the candidate's first call): fork and exec stay allowed until ``forbid_processes()``. It is
    granted only inside a PID namespace, where whatever the window started cannot outlive the
    runner; elsewhere the full filter is installed and the report says so.
    """
    scratch = Path(scratch).resolve()
    report: dict[str, str] = {}
    claimed, judge_mounts = _launched_namespaces()
    namespaces = _verified_namespaces(claimed, judge_mounts) if sys.platform == "linux" else []
    report["isolation_namespaces"] = ",".join(namespaces) or "none"
    if "mount" in namespaces:
        try:
            refused = _private_file_system(scratch, hidden)
            report["isolation_filesystem"] = ("read-only but scratch; private /tmp and /dev/shm"
                                              + (f"; still writable: {', '.join(refused)}"
                                                 if refused else ""))
        except OSError as exc:  # the layers below still hold; the report says what is missing
            namespaces.remove("mount")
            report["isolation_filesystem"] = f"shared with the judge ({exc})"
    else:
        report["isolation_filesystem"] = "shared with the judge (no mount namespace)"
    if not sys.platform.startswith("linux"):
        report["isolation_seccomp"] = f"none: seccomp is a Linux facility ({sys.platform})"
        report["isolation"] = "session"
        return report
    private = [p for p in ("/tmp", "/dev/shm") if "mount" in namespaces and os.path.isdir(p)]
    try:
        abi = restrict_writes([scratch, *map(Path, private)])
        report["isolation_writes"] = (f"scratch{' and private /tmp' if private else ''} only "
                                      f"(landlock ABI {abi})")
    except (LandlockUnavailable, OSError) as exc:
        report["isolation_writes"] = f"not confined by landlock: {exc}"
    report["isolation_sockets_closed"] = str(_close_inherited_sockets(keep_fds))
    report["isolation_limits"] = _set_limits()
    try:
        _drop_capabilities()
        report["isolation_capabilities"] = "none"
    except OSError as exc:
        report["isolation_capabilities"] = f"kept ({exc.strerror})"
    window = allow_processes and "pid" in namespaces
    try:
        installed = install_filter(allow_processes=window)
        report["isolation_seccomp"] = f"filter ({installed.arch}, {installed.instructions} BPF " \
                                      f"instructions)"
    except (SeccompUnavailable, OSError) as exc:
        report["isolation_seccomp"] = f"none: {exc}"
    report["isolation_processes"] = (
        "allowed until forbid_processes()" if window and _filter_on(report)
        else "denied" + (" (a compile window needs a PID namespace)"
                         if allow_processes and not window else ""))
    full = {"pid", "net", "ipc", "mount"} <= set(namespaces)
    layers = [name for name, on in (("namespaces", full), ("seccomp", _filter_on(report))) if on]
    report["isolation"] = "+".join(layers) or "session"
    return report


def _filter_on(report: dict[str, str]) -> bool:
    return report.get("isolation_seccomp", "").startswith("filter")


def forbid_processes() -> list[int]:
    """Close the compile window of ``enter_isolation(allow_processes=True)``: install the full
    filter over it and return the processes other than this one still alive in the runner's
    PID namespace (what the window started and left running: the judge should refuse the
    candidate). Finished children are reaped first."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
    install_filter()
    if os.getpid() != 1:  # no PID namespace: the window was never opened, and /proc is the host's
        return []
    return sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != 1)
