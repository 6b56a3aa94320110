"""How a dead sandbox is described to the person (or agent) who wrote the kernel."""

from __future__ import annotations

import signal

# signal -> (what it is in words, the usual cause in a kernel)
SIGNAL_ADVICE: dict[int, tuple[str, str]] = {
    signal.SIGSEGV: ("segmentation fault",
                     "usually an out-of-bounds access; check index arithmetic against the "
                     "calling contract"),
    signal.SIGBUS: ("bus error", "an access to unmapped or misaligned memory; check pointer "
                    "arithmetic and alignment assumptions"),
    signal.SIGFPE: ("arithmetic exception", "usually an integer division or modulo by zero"),
    signal.SIGILL: ("illegal instruction", "an instruction this CPU lacks (an intrinsic for a "
                    "wider vector unit) or __builtin_trap/unreachable code"),
    signal.SIGABRT: ("abort", "an assertion failed, a C++ exception escaped the kernel, or the "
                     "heap was corrupted by an out-of-bounds write"),
    signal.SIGKILL: ("killed", "most often the memory limit or the out-of-memory killer: check "
                     "allocations inside the kernel"),
    signal.SIGXFSZ: ("file size limit exceeded", "the kernel wrote too much to stdout/stderr"),
    signal.SIGXCPU: ("CPU time limit exceeded", "the kernel ran far too long"),
    signal.SIGTERM: ("terminated", "something outside the evaluator stopped the sandbox"),
}


def describe_exit(returncode: int | None, where: str) -> str:
    """A dead sandbox in words, e.g. 'SIGSEGV (segmentation fault) on shape ... — usually ...'.

    ``where`` says what it was doing ("on shape tokens=16,d=4096,dtype=float32").
    """
    if returncode is None:
        return f"the sandbox closed its result channel {where} (did the kernel close descriptors?)"
    if returncode >= 0:
        return (f"the sandbox exited with status {returncode} {where} — the kernel ended the "
                f"process (exit/quick_exit) instead of returning")
    number = -returncode
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    words, advice = SIGNAL_ADVICE.get(number, ("killed by a signal", "see the log below"))
    return f"{name} ({words}) {where} — {advice}"
