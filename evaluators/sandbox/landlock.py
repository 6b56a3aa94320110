"""Landlock: confine a process's writes to a few folders, without privileges (Linux 5.13+).

Where the runner has no mount namespace (a container that forbids ``unshare``), the file system is
the judge's; Landlock still lets it write only beneath its scratch folder (and to device files
under /dev, which the GPU driver and /dev/null need). Reading is not restricted, except that a
confined process gets no ptrace-level access to unconfined ones (the judge's environment and
memory under /proc). The rules bind
the calling thread and every thread it starts afterwards; threads started before (torch's and
the driver's pools) keep their access, which candidate code does not run on.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Iterable
from pathlib import Path

# The same numbers on x86_64 and aarch64 (added after the tables were unified).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

_WRITE_FILE = 1 << 1
# Every way to change the file system: write, remove, make nodes, directories and links.
_CHANGES = _WRITE_FILE | sum(1 << bit for bit in range(4, 13))
_REFER, _TRUNCATE = 1 << 13, 1 << 14  # ABI 2 and 3


class LandlockUnavailable(RuntimeError):
    """Landlock cannot be applied here; the message says why (nothing was applied)."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _syscall(libc: ctypes.CDLL, number: int, *args: object) -> int:
    result = libc.syscall(ctypes.c_long(number), *args)
    if result < 0:
        code = ctypes.get_errno()
        raise LandlockUnavailable(f"landlock system call {number}: {os.strerror(code)}")
    return result


def abi_version() -> int:
    """The kernel's Landlock ABI version; ``LandlockUnavailable`` where there is none."""
    if not sys.platform.startswith("linux"):
        raise LandlockUnavailable(f"Landlock is a Linux facility; this is {sys.platform}")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return _syscall(libc, _CREATE_RULESET, None, ctypes.c_size_t(0),
                    ctypes.c_uint32(_CREATE_RULESET_VERSION))


def restrict_writes(writable: Iterable[Path], device_files: Path | None = Path("/dev")) -> int:
    """Allow changes to the file system only beneath ``writable`` (and writes to files under
    ``device_files``) for this thread and the threads it starts; return the ABI version used.

    Sets no_new_privs (Landlock requires it). Raises ``LandlockUnavailable`` when the kernel has
    no Landlock or refuses a rule; nothing is enforced then.
    """
    abi = abi_version()
    handled = _CHANGES | (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    attr = _RulesetAttr(handled)
    ruleset = _syscall(libc, _CREATE_RULESET, ctypes.byref(attr),
                       ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0))
    try:
        rules = [(Path(folder), handled) for folder in writable]
        if device_files is not None and device_files.is_dir():
            rules.append((device_files, _WRITE_FILE | (_TRUNCATE if abi >= 3 else 0)))
        for folder, access in rules:
            fd = os.open(folder, os.O_PATH | os.O_DIRECTORY)
            try:
                rule = _PathBeneath(access, fd)
                _syscall(libc, _ADD_RULE, ctypes.c_int(ruleset),
                         ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule), ctypes.c_uint32(0))
            finally:
                os.close(fd)
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
            raise LandlockUnavailable("prctl(PR_SET_NO_NEW_PRIVS) failed")
        _syscall(libc, _RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)
    return abi
