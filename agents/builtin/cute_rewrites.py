"""Rewrites of CuTe kernels (the ``cute`` language): the structure CuTe names, made tunable.

CuTe spells a kernel's data movement as types: a shared-memory layout composed with a
``Swizzle<B, M, S>``, a ``Copy_Atom`` over ``SM80_CP_ASYNC_CACHEGLOBAL`` or ``UniversalCopy``.
These rewrites find such spellings and put them under knobs, so that the tuner (and per-shape
dispatch) can choose them like tile sizes, vector widths and pipeline stages, which the tasks'
CuTe kernels expose as knobs of their own:

- ``swizzle``: the swizzle of shared-memory layouts, ``Swizzle<B, M, S>`` -> the knob
  ``SWIZZLE_BITS`` (B as written first, then fewer bits): which address bits are XORed to
  spread a warp's accesses over the banks. CuTe computes every address through the layout, so
  any value is correct; only bank conflicts change.
- ``cp_async_l1``: ``cp.async`` through L1 as well as L2, ``SM80_CP_ASYNC_CACHEGLOBAL`` (``.cg``)
  -> ``SM80_CP_ASYNC_CACHEALWAYS`` (``.ca``) under the knob ``CP_ASYNC_L1`` (0: as written).

Both act on the text outside comments and strings, and decline where their spelling is absent
or already under a knob.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from kernelswarm.search import MEMORY

from .clike import SourceError, apply_edits, code_start, mask
from .transformation import KnobSpace, Transformation

SWIZZLE_KNOB = "SWIZZLE_BITS"
CP_ASYNC_KNOB = "CP_ASYNC_L1"

_SWIZZLE = re.compile(r"\bSwizzle\s*<\s*(?P<bits>\d+)\s*,\s*(?P<base>\d+)\s*,\s*(?P<shift>\d+)\s*>")
_CACHE_GLOBAL = re.compile(r"\bSM80_CP_ASYNC_CACHEGLOBAL\b")


def _code_start(source: str, knob: str, knob_space: KnobSpace) -> tuple[str, int] | None:
    """(masked source, where file-level code may go) for a rewrite adding ``knob``; None where
    the knob is there already or the source cannot be read with confidence."""
    if knob in knob_space or re.search(rf"\b{knob}\b", source):
        return None
    try:
        masked, start = mask(source), code_start(source)
    except SourceError:
        return None
    return None if start is None else (masked, start)


class Swizzle(Transformation):
    """Every literal ``Swizzle<B, M, S>`` of the source under one knob, ``SWIZZLE_BITS``, with
    the values B (as written), then each smaller count down to 0 (no swizzle)."""

    name = "swizzle"
    languages = ("cute",)
    stage = MEMORY
    description = ("put the shared-memory swizzle (Swizzle<B, M, S>: the address bits XORed to "
                   "spread a warp's accesses over the banks) under the knob SWIZZLE_BITS")
    adds_knobs = (SWIZZLE_KNOB,)
    initial_knobs: Mapping[str, Any] = MappingProxyType({})

    def apply(self, source: str, knob_space: KnobSpace) -> tuple[str, dict[str, tuple[Any, ...]]] | None:
        if (read := _code_start(source, SWIZZLE_KNOB, knob_space)) is None:
            return None
        masked, start = read
        found = list(_SWIZZLE.finditer(masked))
        bits = {int(m.group("bits")) for m in found}
        if len(bits) != 1 or not 0 < next(iter(bits)) <= 3:
            return None  # none, or swizzles of different widths that one knob cannot stand for
        written = next(iter(bits))
        edits = [(m.start("bits"), m.end("bits"), SWIZZLE_KNOB) for m in found]
        prelude = (f"// swizzle: shared-memory swizzles take {SWIZZLE_KNOB} address bits (a tuning "
                   f"knob; {written} as first written).\n#ifndef {SWIZZLE_KNOB}\n"
                   f"#define {SWIZZLE_KNOB} {written}\n#endif\n\n")
        edits.append((start, start, prelude))
        values = tuple(range(written, -1, -1))
        return apply_edits(source, edits), {**knob_space, SWIZZLE_KNOB: values}


class CpAsyncL1(Transformation):
    """``SM80_CP_ASYNC_CACHEGLOBAL`` (L2 only) or ``SM80_CP_ASYNC_CACHEALWAYS`` (L1 and L2) for
    every ``cp.async`` copy atom, by the knob ``CP_ASYNC_L1``; 0 compiles as written."""

    name = "cp_async_l1"
    languages = ("cute",)
    stage = MEMORY
    description = ("let cp.async copies allocate in L1 as well as L2 (.ca instead of .cg) under "
                   "the knob CP_ASYNC_L1, for tiles that neighbouring CTAs read again")
    adds_knobs = (CP_ASYNC_KNOB,)
    initial_knobs: Mapping[str, Any] = MappingProxyType({CP_ASYNC_KNOB: 1})

    def apply(self, source: str, knob_space: KnobSpace) -> tuple[str, dict[str, tuple[Any, ...]]] | None:
        if (read := _code_start(source, CP_ASYNC_KNOB, knob_space)) is None:
            return None
        masked, start = read
        found = list(_CACHE_GLOBAL.finditer(masked))
        if not found:
            return None
        edits = [(m.start(), m.end(), "KS_CP_ASYNC_ATOM") for m in found]
        prelude = (f"// cp_async_l1: cp.async copies through L1 too when {CP_ASYNC_KNOB} is 1 (a "
                   f"tuning knob; 0 as first written).\n#ifndef {CP_ASYNC_KNOB}\n"
                   f"#define {CP_ASYNC_KNOB} 0\n#endif\n#if {CP_ASYNC_KNOB}\n"
                   f"#define KS_CP_ASYNC_ATOM SM80_CP_ASYNC_CACHEALWAYS\n#else\n"
                   f"#define KS_CP_ASYNC_ATOM SM80_CP_ASYNC_CACHEGLOBAL\n#endif\n\n")
        edits.append((start, start, prelude))
        return apply_edits(source, edits), {**knob_space, CP_ASYNC_KNOB: (0, 1)}
