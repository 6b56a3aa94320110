"""A seccomp filter for the process that runs candidate code (classic BPF, installed via ctypes).

What the filter refuses, with ``EPERM`` (so that the candidate gets a clear ``PermissionError``
instead of a dead process), on x86_64 and aarch64:

- new processes: ``fork``, ``vfork``, ``clone`` without ``CLONE_THREAD`` (or with a namespace
  flag), ``execve``, ``execveat``; ``clone3`` answers ``ENOSYS``, so that the C library falls back
  to ``clone`` for threads, which stay allowed (torch and CUDA start threads);
- the network: ``socket``, ``socketpair``, ``connect``, ``bind``, ``listen``, ``accept(4)``;
  ``io_uring`` (which could issue those without a system call the filter sees);
- other processes: ``ptrace``, ``process_vm_readv/writev``, ``kcmp``, ``pidfd_open``,
  ``pidfd_getfd``, ``pidfd_send_signal``, ``tkill``; ``kill``, ``tgkill``, ``rt_sigqueueinfo``
  and ``rt_tgsigqueueinfo`` unless their first argument is the process's own pid (a process
  may still signal itself and its own threads); ``prlimit64``, ``sched_set*``, ``setpriority``,
  ``migrate_pages`` and ``move_pages`` on any process but itself (a limit set on another process
  can kill it), ``ioprio_set`` and ``process_madvise``;
- the system: ``mount``, ``umount2``, the new mount API, ``unshare``, ``setns``, ``chroot``,
  ``pivot_root``, ``mknod(at)``, ``bpf``, ``perf_event_open``, ``userfaultfd``, keyrings,
  ``personality`` (other than a query), file handles, modules, ``kexec``, ``reboot``, swap,
  clocks, host names, port I/O, quotas, and the terminal-injection ioctls ``TIOCSTI`` and
  ``TIOCLINUX``;
- any system call of a foreign ABI (i386 or x32 on x86_64), whose numbers differ.

``perf_event_open`` is refused although a profiler could use it: torch.profiler's CUDA activity
comes from CUPTI through the driver's ioctls, not from perf events. The filter is installed with
``SECCOMP_FILTER_FLAG_TSYNC`` on every thread of the process at once, and stays for its life: no
system call can remove it. With ``allow_processes`` (a compile window for a JIT that runs
``ptxas``), fork, exec and non-thread clones pass; installing the full filter over it closes the
window for good. An unknown architecture raises ``SeccompUnavailable``; nothing is installed
then.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
import sys
from dataclasses import dataclass

# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6] (little-endian)
_NR, _ARCH, _ARG0_LO, _ARG1_LO = 0, 4, 16, 24

_BPF_LD_W_ABS = 0x20
_BPF_JEQ, _BPF_JGE, _BPF_JSET = 0x15, 0x35, 0x45
_BPF_RET = 0x06

_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000

_CLONE_THREAD = 0x00010000
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET: no new namespaces.
_CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 \
    | 0x20000000 | 0x40000000
_X32_SYSCALL_BIT = 0x40000000
_PERSONALITY_QUERY = 0xFFFFFFFF
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C

_PR_SET_NO_NEW_PRIVS = 38
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1


@dataclass(frozen=True)
class Architecture:
    """One system-call ABI: its audit tag and the numbers of the calls the filter names."""

    name: str
    audit_arch: int
    numbers: dict[str, int]
    foreign_bit: int | None = None  # numbers with this bit set belong to another ABI


# Denied outright (EPERM). Names an architecture lacks (fork on aarch64) are skipped there.
DENIED = (
    "fork", "vfork", "execve", "execveat",
    "socket", "socketpair", "connect", "bind", "listen", "accept", "accept4",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "tkill",
    "pidfd_open", "pidfd_getfd", "pidfd_send_signal",
    "mount", "umount2", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick",
    "mount_setattr", "unshare", "setns", "chroot", "pivot_root", "mknod", "mknodat",
    "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key",
    "name_to_handle_at", "open_by_handle_at", "init_module", "finit_module", "delete_module",
    "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff", "acct", "syslog",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "sethostname",
    "setdomainname", "iopl", "ioperm", "quotactl", "uselib", "vhangup", "ioprio_set",
    "process_madvise",
)
# What ``allow_processes`` lets through (a compile window: a JIT that runs ptxas or a C compiler).
PROCESS_CREATION = ("fork", "vfork", "execve", "execveat")
# Allowed only when the first argument is the process's own pid.
SELF_ONLY_SIGNALS = ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")
# Allowed only on this process (a first argument of 0 or its own pid): another process's limits
# (RLIMIT_CPU would kill it), CPUs, scheduling or memory placement are not the runner's.
SELF_ONLY_CONTROLS = ("prlimit64", "sched_setaffinity", "sched_setscheduler", "sched_setparam",
                      "sched_setattr", "migrate_pages", "move_pages")

X86_64 = Architecture("x86_64", 0xC000003E, {
    "read": 0, "ioctl": 16, "fork": 57, "vfork": 58, "clone": 56, "clone3": 435, "execve": 59,
    "execveat": 322, "socket": 41, "socketpair": 53, "connect": 42, "bind": 49, "listen": 50,
    "accept": 43, "accept4": 288, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
    "kcmp": 312, "tkill": 200, "pidfd_open": 434, "pidfd_getfd": 438, "pidfd_send_signal": 424,
    "kill": 62, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297, "mount": 165,
    "umount2": 166, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
    "fsmount": 432, "fspick": 433, "mount_setattr": 442, "unshare": 272, "setns": 308,
    "chroot": 161, "pivot_root": 155, "mknod": 133, "mknodat": 259, "bpf": 321,
    "perf_event_open": 298, "userfaultfd": 323, "keyctl": 250, "add_key": 248,
    "request_key": 249, "personality": 135, "name_to_handle_at": 303, "open_by_handle_at": 304,
    "init_module": 175, "finit_module": 313, "delete_module": 176, "kexec_load": 246,
    "kexec_file_load": 320, "reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163,
    "syslog": 103, "settimeofday": 164, "clock_settime": 227, "clock_adjtime": 305,
    "adjtimex": 159, "sethostname": 170, "setdomainname": 171, "iopl": 172, "ioperm": 173,
    "quotactl": 179, "uselib": 134, "vhangup": 153, "seccomp": 317, "ioprio_set": 251,
    "process_madvise": 440, "prlimit64": 302, "sched_setaffinity": 203,
    "sched_setscheduler": 144, "sched_setparam": 142, "sched_setattr": 314,
    "migrate_pages": 256, "move_pages": 279, "setpriority": 141,
}, foreign_bit=_X32_SYSCALL_BIT)

AARCH64 = Architecture("aarch64", 0xC00000B7, {
    "read": 63, "ioctl": 29, "clone": 220, "clone3": 435, "execve": 221, "execveat": 281,
    "socket": 198, "socketpair": 199, "connect": 203, "bind": 200, "listen": 201, "accept": 202,
    "accept4": 242, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272, "tkill": 130,
    "pidfd_open": 434, "pidfd_getfd": 438, "pidfd_send_signal": 424, "kill": 129, "tgkill": 131,
    "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240, "mount": 40, "umount2": 39,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
    "fspick": 433, "mount_setattr": 442, "unshare": 97, "setns": 268, "chroot": 51,
    "pivot_root": 41, "mknodat": 33, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
    "keyctl": 219, "add_key": 217, "request_key": 218, "personality": 92,
    "name_to_handle_at": 264, "open_by_handle_at": 265, "init_module": 105, "finit_module": 273,
    "delete_module": 106, "kexec_load": 104, "kexec_file_load": 294, "reboot": 142,
    "swapon": 224, "swapoff": 225, "acct": 89, "syslog": 116, "settimeofday": 170,
    "clock_settime": 112, "clock_adjtime": 266, "adjtimex": 171, "sethostname": 161,
    "setdomainname": 162, "quotactl": 60, "vhangup": 58, "seccomp": 277, "ioprio_set": 30,
    "process_madvise": 440, "prlimit64": 261, "sched_setaffinity": 122,
    "sched_setscheduler": 119, "sched_setparam": 118, "sched_setattr": 274,
    "migrate_pages": 238, "move_pages": 239, "setpriority": 140,
})

_MACHINES = {"x86_64": X86_64, "amd64": X86_64, "aarch64": AARCH64, "arm64": AARCH64}


class SeccompUnavailable(RuntimeError):
    """The filter cannot be installed here; the message says why (nothing was installed)."""


def architecture() -> Architecture:
    """The ABI of this process, or ``SeccompUnavailable`` on one the filter has no numbers for."""
    if not sys.platform.startswith("linux"):
        raise SeccompUnavailable(f"seccomp is a Linux facility; this is {sys.platform}")
    machine = platform.machine().lower()
    if machine not in _MACHINES or struct.calcsize("P") != 8:
        raise SeccompUnavailable(f"no system-call table for {machine} "
                                 f"({8 * struct.calcsize('P')}-bit); the filter knows "
                                 f"x86_64 and aarch64")
    return _MACHINES[machine]


def _stmt(code: int, k: int) -> tuple[int, int, int, int]:
    return (code, 0, 0, k)


def _jump(code: int, k: int, jt: int, jf: int) -> tuple[int, int, int, int]:
    return (code, jt, jf, k)


def _errno(number: int) -> int:
    return _RET_ERRNO | (number & 0xFFFF)


def _first_argument_is(k: int, offset: int = _ARG0_LO) -> list[tuple[int, int, int, int]]:
    """Allow when the (low 32 bits of the) argument equals ``k``, else EPERM."""
    return [_stmt(_BPF_LD_W_ABS, offset), _jump(_BPF_JEQ, k, 0, 1),
            _stmt(_BPF_RET, _RET_ALLOW), _stmt(_BPF_RET, _errno(errno.EPERM))]


def _block(nr: int, body: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int]]:
    """``body`` (which ends in returns) runs when the call number is ``nr``; else skipped."""
    return [_jump(_BPF_JEQ, nr, 0, len(body)), *body]


def filter_program(arch: Architecture, own_pid: int, *, allow_processes: bool = False
                   ) -> list[tuple[int, int, int, int]]:
    """The filter's instructions (code, jt, jf, k) for ``arch``, letting ``own_pid`` signal itself;
    with ``allow_processes``, fork, exec and non-thread clones pass (nothing else does).

    Each check is a short block that returns, so no jump is longer than a few instructions (BPF
    jump offsets are 8 bits).
    """
    deny = _stmt(_BPF_RET, _errno(errno.EPERM))
    program = [_stmt(_BPF_LD_W_ABS, _ARCH), _jump(_BPF_JEQ, arch.audit_arch, 1, 0), deny,
               _stmt(_BPF_LD_W_ABS, _NR)]
    if arch.foreign_bit is not None:
        program += [_jump(_BPF_JGE, arch.foreign_bit, 0, 1), deny]
    numbers = arch.numbers
    for name in DENIED:
        if name in numbers and not (allow_processes and name in PROCESS_CREATION):
            program += _block(numbers[name], [deny])
    program += _block(numbers["clone3"], [_stmt(_BPF_RET, _errno(errno.ENOSYS))])
    program += _block(numbers["clone"], [
        _stmt(_BPF_LD_W_ABS, _ARG0_LO),
        _jump(_BPF_JSET, _CLONE_NAMESPACES, 2, 0),
        _jump(_BPF_JSET, 0xFFFFFFFF if allow_processes else _CLONE_THREAD, 0, 1),
        _stmt(_BPF_RET, _RET_ALLOW), deny])
    for name in SELF_ONLY_SIGNALS:
        program += _block(numbers[name], _first_argument_is(own_pid))
    for name in SELF_ONLY_CONTROLS:
        program += _block(numbers[name], [
            _stmt(_BPF_LD_W_ABS, _ARG0_LO), _jump(_BPF_JEQ, 0, 1, 0),
            _jump(_BPF_JEQ, own_pid, 0, 1), _stmt(_BPF_RET, _RET_ALLOW), deny])
    program += _block(numbers["setpriority"], [  # (PRIO_PROCESS, 0 or own pid) only
        _stmt(_BPF_LD_W_ABS, _ARG0_LO), _jump(_BPF_JEQ, 0, 0, 4),
        _stmt(_BPF_LD_W_ABS, _ARG1_LO), _jump(_BPF_JEQ, 0, 1, 0),
        _jump(_BPF_JEQ, own_pid, 0, 1), _stmt(_BPF_RET, _RET_ALLOW), deny])
    program += _block(numbers["personality"], _first_argument_is(_PERSONALITY_QUERY))
    program += _block(numbers["ioctl"], [
        _stmt(_BPF_LD_W_ABS, _ARG1_LO),
        _jump(_BPF_JEQ, _TIOCSTI, 1, 0),
        _jump(_BPF_JEQ, _TIOCLINUX, 0, 1), deny,
        _stmt(_BPF_RET, _RET_ALLOW)])
    program.append(_stmt(_BPF_RET, _RET_ALLOW))
    return program


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def set_no_new_privs() -> None:
    """``PR_SET_NO_NEW_PRIVS``: no exec can ever gain privileges (setuid, file capabilities)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")


@dataclass(frozen=True)
class SeccompReport:
    """What was installed: the ABI and the number of BPF instructions."""

    arch: str
    instructions: int
    denied: tuple[str, ...]


def install_filter(own_pid: int | None = None, *, allow_processes: bool = False
                   ) -> SeccompReport:
    """Install the filter on every thread of this process (no_new_privs first).

    Filters stack: installing the full filter over one that allowed processes closes the window;
    nothing can open it again. Raises ``SeccompUnavailable`` when this platform has no filter,
    ``OSError`` when the kernel refuses it; in both cases nothing is installed.
    """
    arch = architecture()
    own_pid = os.getpid() if own_pid is None else own_pid
    program = filter_program(arch, own_pid, allow_processes=allow_processes)
    instructions = (_SockFilter * len(program))(*(_SockFilter(*i) for i in program))
    fprog = _SockFprog(len(program), instructions)
    set_no_new_privs()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    result = libc.syscall(ctypes.c_long(arch.numbers["seccomp"]),
                          ctypes.c_long(_SECCOMP_SET_MODE_FILTER),
                          ctypes.c_long(_SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(fprog))
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"seccomp(SET_MODE_FILTER) failed: {os.strerror(code)}")
    if result > 0:  # TSYNC names a thread that could not be synchronised
        raise OSError(errno.EBUSY, f"seccomp could not reach thread {result} (it has another "
                                   f"filter); nothing was installed")
    names = tuple(n for n in DENIED + SELF_ONLY_SIGNALS + SELF_ONLY_CONTROLS
                  + ("clone3", "setpriority") if n in arch.numbers
                  and not (allow_processes and n in PROCESS_CREATION))
    return SeccompReport(arch.name, len(program), names)
