"""CUDA errors in words: what went wrong, whether the process survives it, and what to change.

A CUDA error reaches the sandbox in one of three shapes: a ``CudaDriverError`` raised by the
``cuda`` language's launcher (it carries the driver's ``CUresult`` name), a ``torch`` exception
(``torch.AcceleratorError`` with an ``error_code``, ``torch.OutOfMemoryError``), or, from older
libraries, a ``RuntimeError`` whose text is the runtime's error string. ``classify`` turns any of
them into a ``CudaFailure``; anything else is not a CUDA error and is left to the caller.

A *sticky* error (an illegal address, a trap, a hardware exception inside a kernel) leaves the
process's CUDA context unusable: every later CUDA call fails with the same error. The sandbox is
then replaced before the next candidate, and no health check is attempted in it.
"""

from __future__ import annotations

from dataclasses import dataclass


class CudaDriverError(RuntimeError):
    """A CUDA driver call that failed; ``code`` is the numeric ``CUresult``, ``name`` its name."""

    def __init__(self, code: int, name: str, what: str) -> None:
        super().__init__(f"{name} ({code}) {what}")
        self.code = code
        self.name = name
        self.what = what


@dataclass(frozen=True)
class _Kind:
    name: str
    sticky: bool
    advice: str


# Error numbers are shared by the runtime (cudaError_t) and the driver (CUresult) for these.
_KINDS: dict[int, _Kind] = {
    700: _Kind("illegal memory access", True,
               "a load or store outside any allocation: check the index arithmetic and the bounds "
               "guard against the calling contract (the last block of an odd size especially)"),
    716: _Kind("misaligned address", True,
               "a vector access (float4, uint4, __nv_bfloat162, ...) at an address not aligned "
               "to its size: rows of odd length break 8- and 16-byte vector loads; fall back to "
               "scalar accesses there"),
    715: _Kind("illegal instruction", True,
               "an instruction this GPU lacks (code built for another architecture, or an "
               "sm_90a-only instruction without that target) or __trap()"),
    717: _Kind("invalid address space", True,
               "a generic pointer used with an instruction of the wrong state space (shared vs "
               "global), usually in inline PTX"),
    718: _Kind("invalid program counter", True, "a jump to an invalid address; see the kernel's "
               "function pointers or inline PTX"),
    719: _Kind("launch failure", True,
               "the kernel faulted (an exception inside the kernel, often a bad pointer "
               "dereference); check pointer arithmetic"),
    714: _Kind("hardware stack error", True,
               "the call stack overflowed: deep recursion or very large local arrays"),
    710: _Kind("device-side assert", True, "an assert() in the kernel failed"),
    702: _Kind("launch timeout", True, "the kernel ran past the watchdog: an endless loop?"),
    214: _Kind("uncorrectable ECC error", True,
               "a hardware memory error, not the kernel's fault; the GPU may need attention"),
    999: _Kind("unknown CUDA error", True, "the driver reported an unknown error"),
    701: _Kind("too many resources requested for launch", False,
              "the block needs more registers or shared memory than a multiprocessor has: use "
              "fewer threads per block, cap registers (__launch_bounds__), or less shared memory"),
    2: _Kind("out of GPU memory", False,
             "an allocation did not fit: the kernel or its launcher asked for more memory than "
             "is free"),
    1: _Kind("invalid launch argument", False,
             "a launch argument is out of range: block size above 1024 threads or above the "
             "kernel's limit, a zero-sized grid, grid.y/z above 65535, or dynamic shared memory "
             "above 48 KB without raising the kernel's limit"),
    9: _Kind("invalid launch configuration", False,
             "block or grid dimensions out of range (at most 1024 threads per block, grid.y/z "
             "at most 65535)"),
    209: _Kind("no binary for this GPU", False,
               "the kernel was built for another architecture: check EvaluatorSettings.cuda_arch"),
    222: _Kind("unsupported PTX version", False,
               "the compiler is newer than the driver: build for an older target or update the "
               "driver"),
}

# The runtime's error strings, for exceptions that carry only text.
_MESSAGES: tuple[tuple[str, int], ...] = (
    ("illegal memory access", 700),
    ("misaligned address", 716),
    ("illegal instruction", 715),
    ("operation not supported on global/shared address space", 717),
    ("invalid program counter", 718),
    ("unspecified launch failure", 719),
    ("hardware stack error", 714),
    ("device-side assert", 710),
    ("launch timed out", 702),
    ("uncorrectable ecc error", 214),
    ("too many resources requested for launch", 701),
    ("out of memory", 2),
    ("invalid configuration argument", 9),
    ("no kernel image is available", 209),
    ("unsupported ptx", 222),
)


@dataclass(frozen=True)
class CudaFailure:
    """A classified CUDA error: ``sticky`` means the process must be replaced."""

    code: int
    kind: str
    sticky: bool
    advice: str
    detail: str

    def describe(self, where: str) -> str:
        """The failure in words, e.g. 'CUDA error: illegal memory access on shape ... — ...'."""
        text = f"CUDA error: {self.kind} {where} — {self.advice}"
        if self.sticky:
            text += (" (a sticky error: the CUDA context is unusable afterwards, so the sandbox "
                     "process was replaced)")
        return f"{text}\ndriver said: {self.detail}" if self.detail else text


def _failure(code: int, detail: str) -> CudaFailure:
    kind = _KINDS.get(code)
    if kind is None:  # an error we do not know: assume the worst for the process
        return CudaFailure(code, f"CUDA error {code}", True, "see the driver's message", detail)
    return CudaFailure(code, kind.name, kind.sticky, kind.advice, detail)


def classify(exc: BaseException) -> CudaFailure | None:
    """The CUDA failure ``exc`` stands for, or None when it is not a CUDA error."""
    detail = " ".join(str(exc).split())[:400]
    if isinstance(exc, CudaDriverError):
        return _failure(exc.code, detail)
    code = getattr(exc, "error_code", None)
    if isinstance(code, int) and code > 0:
        return _failure(code, detail)
    if type(exc).__name__ == "OutOfMemoryError":
        return _failure(2, detail)
    if not isinstance(exc, RuntimeError):
        return None
    text = str(exc).lower()
    if "cuda" not in text:
        return None
    for needle, number in _MESSAGES:
        if needle in text:
            return _failure(number, detail)
    return _failure(999, detail) if "cuda error" in text else None


def is_sticky(exc: BaseException) -> bool:
    """Whether ``exc`` is a CUDA error after which the process's context is unusable."""
    failure = classify(exc)
    return failure is not None and failure.sticky
