"""The seccomp filter of the candidate runner, by raw system call: each denied call answers EPERM
(clone3 ENOSYS) in a process that survives; threads, memory, files and signals to itself work."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernelswarm.evaluators.sandbox import seccomp

SANDBOX = Path(seccomp.__file__).parent
IS_LINUX = sys.platform.startswith("linux")


def require_seccomp() -> None:
    try:
        seccomp.architecture()
    except seccomp.SeccompUnavailable as exc:
        pytest.skip(str(exc))


# Each denied call with arguments that are harmless if the filter let it through (signal 0, a
# missing path, a bad descriptor), so that a failing filter fails the test and nothing else.
SYSCALL_PROBE = textwrap.dedent("""
    import ctypes, errno, importlib, json, mmap, os, signal, sys, threading, types
    config = json.loads(sys.argv[1])
    package = types.ModuleType("seccomp_under_test")
    package.__path__ = [config["sandbox"]]
    sys.modules["seccomp_under_test"] = package
    seccomp = importlib.import_module("seccomp_under_test.seccomp")
    arch = seccomp.architecture()
    persona = ctypes.CDLL(None).personality(0xFFFFFFFF)
    seccomp.install_filter()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    victim, missing = config["victim"], b"/nonexistent-" + os.urandom(4).hex().encode()
    calls = {
        "clone": (0x11, 0, 0, 0, 0),  # SIGCHLD only: a fork
        "clone3": (0, 0), "execve": (b"/bin/true", 0, 0), "execveat": (-1, b"", 0, 0, 0),
        "socket": (1, 1, 0), "socketpair": (1, 1, 0, 0), "connect": (-1, 0, 0),
        "bind": (-1, 0, 0), "listen": (-1, 0), "accept": (-1, 0, 0), "accept4": (-1, 0, 0, 0),
        "ptrace": (2, victim, 0, 0), "process_vm_readv": (victim, 0, 0, 0, 0, 0),
        "process_vm_writev": (victim, 0, 0, 0, 0, 0), "kill": (victim, 0),
        "tkill": (victim, 0), "tgkill": (victim, victim, 0), "pidfd_open": (victim, 0),
        "pidfd_send_signal": (-1, 0, 0, 0), "pidfd_getfd": (-1, 0, 0),
        "rt_sigqueueinfo": (victim, 0, 0), "mount": (b"none", missing, b"tmpfs", 0, 0),
        "umount2": (missing, 0), "unshare": (0,), "setns": (-1, 0), "chroot": (missing,),
        "pivot_root": (missing, missing), "mknodat": (-100, missing, 0, 0), "bpf": (-1, 0, 0),
        "perf_event_open": (0, 0, -1, -1, 0), "keyctl": (-1, 0, 0, 0, 0),
        "io_uring_setup": (0, 0), "kcmp": (victim, victim, 0, 0, 0),
        "personality": (persona,), "open_tree": (-1, b"", 0), "fsopen": (b"tmpfs", 0),
        "ioctl": (-1, 0x5412, 0), "prlimit64": (victim, 0, 0, 0),
        "sched_setaffinity": (victim, 0, 0), "setpriority": (0, victim, 0),
        "ioprio_set": (1, victim, 0), "migrate_pages": (victim, 0, 0, 0),
    }
    if "fork" in arch.numbers:
        calls["fork"] = ()
    out = {}
    for name, args in calls.items():
        result = libc.syscall(arch.numbers[name], *args)
        if result == 0 and name in ("fork", "clone"):
            os._exit(0)  # the child of a filter that let it through
        out[name] = errno.errorcode.get(ctypes.get_errno(), "") if result < 0 else "allowed"
    if arch.foreign_bit is not None:
        libc.syscall(arch.foreign_bit | 39)  # getpid through the x32 ABI
        out["x32"] = errno.errorcode.get(ctypes.get_errno(), "")
    allowed = {}
    allowed["own_signal"] = libc.syscall(arch.numbers["kill"], os.getpid(), 0)
    allowed["own_thread"] = libc.syscall(arch.numbers["tgkill"], os.getpid(),
                                         threading.get_native_id(), 0)
    allowed["personality_query"] = int(libc.syscall(arch.numbers["personality"], 0xFFFFFFFF) >= 0)
    allowed["own_limits"] = libc.syscall(arch.numbers["prlimit64"], 0, 7, 0, 0)
    allowed["own_priority"] = libc.syscall(arch.numbers["setpriority"], 0, 0, 0)
    box = []
    worker = threading.Thread(target=lambda: box.append(os.getpid()))
    worker.start(); worker.join()
    allowed["thread"] = int(box == [os.getpid()])
    block = mmap.mmap(-1, 1 << 20)
    block[:5] = b"hello"
    allowed["mmap"] = int(block[:5] == b"hello")
    allowed["read_file"] = int(len(open(sys.executable, "rb").read(64)) == 64)
    print(json.dumps({"denied": out, "allowed": allowed}))
""")


def test_the_seccomp_filter_denies_each_escape_and_keeps_the_process_alive():
    require_seccomp()
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        config = {"sandbox": str(SANDBOX), "victim": victim.pid}
        done = subprocess.run([sys.executable, "-c", SYSCALL_PROBE, json.dumps(config)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(done.stdout)
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()
    denied = result["denied"]
    assert denied.pop("clone3") == "ENOSYS"  # so that the C library falls back to clone
    assert {name: got for name, got in denied.items() if got != "EPERM"} == {}
    assert result["allowed"] == {"own_signal": 0, "own_thread": 0, "personality_query": 1,
                                 "own_limits": 0, "own_priority": 0, "thread": 1, "mmap": 1,
                                 "read_file": 1}


def test_an_unknown_architecture_is_refused_and_nothing_is_installed(monkeypatch):
    monkeypatch.setattr(seccomp.platform, "machine", lambda: "riscv64")
    with pytest.raises(seccomp.SeccompUnavailable, match="riscv64"):
        seccomp.install_filter()
    assert "Seccomp:\t0" in Path("/proc/self/status").read_text() or not IS_LINUX


def test_the_filter_program_keeps_its_jumps_short():
    """BPF jump offsets are 8 bits; every check is a short block (the kernel would refuse)."""
    for arch in (seccomp.X86_64, seccomp.AARCH64):
        program = seccomp.filter_program(arch, own_pid=4242)
        assert len(program) < 4096
        assert all(jt < 256 and jf < 256 for _, jt, jf, _ in program)
        assert program[-1] == (0x06, 0, 0, 0x7FFF0000)  # what is not named is allowed


HEADERS = {  # where Linux's headers list each ABI's system-call numbers, when installed
    "x86_64": ([Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
                Path("/usr/include/asm/unistd_64.h")], r"#define __NR_(\w+)\s+(\d+)"),
    "aarch64": ([Path("/usr/include/asm-generic/unistd.h")],
                r"#define __NR(?:3264)?_(\w+)\s+(\d+)"),
}


@pytest.mark.parametrize("arch", [seccomp.X86_64, seccomp.AARCH64], ids=lambda a: a.name)
def test_the_system_call_numbers_match_the_kernel_headers(arch):
    paths, pattern = HEADERS[arch.name]
    found = [p for p in paths if p.is_file()]
    if not found:
        pytest.skip(f"no {arch.name} kernel headers here ({', '.join(map(str, paths))})")
    numbers = {m.group(1): int(m.group(2)) for m in re.finditer(pattern, found[0].read_text())}
    wrong = {name: (number, numbers.get(name)) for name, number in arch.numbers.items()
             if numbers.get(name) != number}
    assert wrong == {}
