"""Correctness checks on tensors: poison, unchanged inputs, exact structure, tolerances, bits.

Pure functions of tensors; the run phase decides what a failure means (which status, which shape).
Floating outputs must match the reference within |out - ref| <= atol + rtol * |ref| (per dtype,
from the task) where both are finite; NaN and Inf must sit at the same positions (Inf with the same
sign). Other dtypes must match exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ..search import Tolerance

# Before the checked call, outputs hold NaN (floats) or the dtype's maximum (integers): an element
# the kernel does not write then shows as NaN-where-finite. The second, different poison is for
# the determinism call, so that an unwritten element differs between the two calls.
# Elements compared at once: a chunk's float64 temporaries are about a GB; a KernelBench output
# of 1.6e9 elements compared whole needed about 80 GB of them.
CHUNK_ELEMENTS = 1 << 24
FIRST_POISON = "first"
SECOND_POISON = "second"


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def poison(outputs: Sequence[torch.Tensor], which: str) -> None:
    """Overwrite every output with the ``which`` poison value."""
    for out in outputs:
        if out.dtype.is_floating_point or out.dtype.is_complex:
            out.fill_(math.nan if which == FIRST_POISON else -math.inf)
        elif out.dtype == torch.bool:
            out.fill_(which == FIRST_POISON)
        else:
            info = torch.iinfo(out.dtype)
            out.fill_(info.max if which == FIRST_POISON else info.min)


def poison_all(copies: Sequence[Sequence[torch.Tensor]]) -> None:
    """Every output of ``copies`` overwritten with the first poison, as ``poison`` would: the
    floating-point ones of a dtype together by multi-tensor kernels (NaN times anything is
    NaN), a few launches for hundreds of copies where a fill each would be one launch a
    tensor; the others one by one."""
    floats: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
    for outputs in copies:
        for out in outputs:
            if out.dtype.is_floating_point or out.dtype.is_complex:
                floats.setdefault((out.dtype, out.device), []).append(out)
            else:
                poison((out,), FIRST_POISON)
    for group in floats.values():
        torch._foreach_mul_(group, math.nan)


def fingerprint(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """One int64 per tensor, on its device: the sum of its bytes read as int32 words (as bytes
    where its size is not a multiple of four), accumulated in int64. Integer sums do not depend
    on the order of the reduction or on where the tensor lies, so the runner and the judge get
    the same figure for the same bytes on any device; any change of a tensor's contents changes
    it but for a collision. One small reduction per tensor, queued on the current stream."""
    sums = []
    for tensor in tensors:
        raw = tensor.detach().contiguous().view(-1).view(torch.uint8)
        if raw.numel() % 4 == 0:
            raw = (raw if raw.storage_offset() % 4 == 0 else raw.clone()).view(torch.int32)
        sums.append(raw.sum(dtype=torch.int64))
    if not sums:
        return torch.zeros(0, dtype=torch.int64)
    return torch.stack(sums)


def clones(tensors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return tuple(t.clone() for t in tensors)


def refill(buffers: Sequence[torch.Tensor], values: Sequence[torch.Tensor]) -> bool:
    """Copy ``values`` into ``buffers`` in place (same storage, new contents); True when any
    bit changed, i.e. when a call on the refilled buffers tells a cached result from a fresh one."""
    changed = first_bit_difference(buffers, values) is not None
    for buffer, value in zip(buffers, values, strict=True):
        buffer.copy_(value)
    return changed


@dataclass(frozen=True)
class Difference:
    """The first element where two tensor lists differ."""

    tensor: int
    index: tuple[int, ...]

    def where(self, what: str) -> str:
        return f"{what} {self.tensor} at index {list(self.index)}"


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def first_bit_difference(before: Sequence[torch.Tensor],
                         after: Sequence[torch.Tensor]) -> Difference | None:
    """The first element whose bits differ between ``before`` and ``after`` (same structure)."""
    for i, (a, b) in enumerate(zip(before, after, strict=True)):
        if a.shape != b.shape or a.dtype != b.dtype:
            return Difference(i, ())
        left, right = _bytes(a), _bytes(b)
        step = CHUNK_ELEMENTS * 8
        for start in range(0, left.numel(), step):
            differs = left[start:start + step] != right[start:start + step]
            if bool(differs.any()):
                at = start + int(torch.argmax(differs.to(torch.uint8)))
                return Difference(i, _unravel(at // max(a.element_size(), 1), a.shape))
    return None


def structure_problem(outputs: Sequence[object], reference: Sequence[torch.Tensor]) -> str | None:
    """Why ``outputs`` do not have the reference's count, type, shape, dtype and device."""
    if len(outputs) != len(reference):
        return f"{len(outputs)} outputs, the reference has {len(reference)}"
    for i, (out, ref) in enumerate(zip(outputs, reference, strict=True)):
        if type(out) is not torch.Tensor:
            return f"output {i} is a {type(out).__name__}, not a torch.Tensor"
        for attr in ("shape", "dtype", "device"):
            if getattr(out, attr) != getattr(ref, attr):
                return (f"output {i} has {attr} {getattr(out, attr)}, the reference has "
                        f"{getattr(ref, attr)}")
    return None


@dataclass(frozen=True)
class Mismatch:
    """Where and how far an output is from the reference."""

    tensor: int
    index: tuple[int, ...]
    got: float
    expected: float
    bad: int
    total: int
    unwritten: int  # NaN where the reference is not: poison left in place (or a computed NaN)
    tolerance: Tolerance

    def describe(self) -> str:
        text = (f"output {self.tensor} at index {list(self.index)}: got {self.got!r}, expected "
                f"{self.expected!r}; {self.bad} of {self.total} elements are wrong "
                f"(atol={self.tolerance.atol:g}, rtol={self.tolerance.rtol:g})")
        if self.unwritten:
            text += (f"; {self.unwritten} are NaN where the reference is not: outputs are "
                     f"poisoned with NaN before the call, so the kernel did not write them "
                     f"(or computed NaN)")
        return text


@dataclass(frozen=True)
class Comparison:
    """Largest errors over all outputs, and the first mismatch if any."""

    max_abs_err: float
    max_rel_err: float
    mismatch: Mismatch | None


@dataclass
class _Tally:
    """One output's comparison so far, over the chunks seen."""

    max_abs: float = 0.0
    max_rel: float = 0.0
    special: bool = False  # a NaN or an infinity where the reference has none, or the reverse
    bad: int = 0
    unwritten: int = 0
    first: tuple[int, float, float] | None = None  # flat index, got, expected


def _compare_chunk(o: torch.Tensor, r: torch.Tensor, tol: Tolerance, offset: int,
                   tally: _Tally) -> None:
    o, r = o.to(torch.float64), r.to(torch.float64)
    o_nan, r_nan, o_inf, r_inf = o.isnan(), r.isnan(), o.isinf(), r.isinf()
    finite = ~(o_nan | r_nan | o_inf | r_inf)
    diff = torch.where(finite, (o - r).abs(), torch.zeros_like(o))
    rel = diff / r.abs().clamp_min(torch.finfo(torch.float64).tiny)
    bad = ((o_nan != r_nan) | (o_inf != r_inf) | (o_inf & r_inf & (o.sign() != r.sign()))
           | (finite & (diff > tol.atol + tol.rtol * r.abs())))
    tally.special |= bool(((o_nan != r_nan) | (o_inf != r_inf)).any())
    if diff.numel():
        tally.max_abs = max(tally.max_abs, float(diff.max()))
        tally.max_rel = max(tally.max_rel, float(rel.max()))
    count = int(bad.sum())
    tally.bad += count
    tally.unwritten += int((o_nan & ~r_nan).sum())
    if count and tally.first is None:
        at = int(torch.argmax(bad.to(torch.uint8)))
        tally.first = (offset + at, float(o[at]), float(r[at]))


def compare(outputs: Sequence[torch.Tensor], reference: Sequence[torch.Tensor],
            tolerance_for: Callable[[str], Tolerance]) -> Comparison:
    """Compare outputs with the reference, element by element, ``CHUNK_ELEMENTS`` at a time (in
    float64: a comparison's temporaries stay near a GB however large the outputs)."""
    max_abs = max_rel = 0.0
    first: Mismatch | None = None
    for i, (out, ref) in enumerate(zip(outputs, reference, strict=True)):
        exact = not (ref.dtype.is_floating_point or ref.dtype.is_complex)
        tol = Tolerance(0.0, 0.0) if exact else tolerance_for(dtype_name(ref.dtype))
        o_flat, r_flat = out.detach().reshape(-1), ref.detach().reshape(-1)
        tally = _Tally()
        for start in range(0, o_flat.numel(), CHUNK_ELEMENTS):
            end = start + CHUNK_ELEMENTS
            _compare_chunk(o_flat[start:end], r_flat[start:end], tol, start, tally)
        if o_flat.numel():
            max_abs = max(max_abs, math.inf if tally.special else tally.max_abs)
            max_rel = max(max_rel, math.inf if tally.special else tally.max_rel)
        if tally.first is not None and first is None:
            flat, got, expected = tally.first
            first = Mismatch(tensor=i, index=_unravel(flat, out.shape), got=got,
                             expected=expected, bad=tally.bad, total=o_flat.numel(),
                             unwritten=tally.unwritten, tolerance=tol)
    return Comparison(max_abs, max_rel, first)


def _unravel(flat: int, shape: Sequence[int]) -> tuple[int, ...]:
    index = []
    for size in reversed(tuple(shape)):
        index.append(flat % size if size else 0)
        flat = flat // size if size else 0
    return tuple(reversed(index))
