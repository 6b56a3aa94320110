"""Rewrites for cpp kernels that tell g++ what it cannot prove: no aliasing, independent
iterations, how far to unroll, which vector ISA the host has. (``fast_exp`` has its own module.)"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .clike import Loop, SourceError, apply_edits, code_start, extern_c_functions, for_loops
from .transformation import KnobSpace, Transformation

_RESTRICT_SPELLINGS = re.compile(r"\b(__restrict__|__restrict|restrict)\b")
# What may follow the last '*' of a pointer parameter: cv-qualifiers and the name.
_POINTER_TAIL = re.compile(r"^\s*(?:(?:const|volatile)\b\s*)*(?:\w+)?\s*$")


def restrict_edit(source: str, text: str, start: int) -> tuple[int, int, str] | None:
    """The insertion of ``__restrict__`` after the last ``*`` of one parameter, if it is a pointer."""
    if any(ch in text for ch in "()[]&") or _RESTRICT_SPELLINGS.search(text):
        return None
    star = text.rfind("*")
    if star < 0 or not _POINTER_TAIL.match(text[star + 1:]):
        return None
    at = start + star + 1
    spacer = "" if source[at:at + 1].isspace() else " "
    return at, at, " __restrict__" + spacer


class Restrict(Transformation):
    """Mark the pointer parameters of ``extern "C"`` functions ``__restrict__``.

    It asserts that the buffers a kernel is called with do not overlap, which the task's calling
    contract guarantees (outputs are allocated apart from inputs); g++ can then vectorise
    without run-time overlap checks and keep loaded values in registers across stores.
    """

    name = "restrict"
    languages = ("cpp",)
    description = ("mark the pointer parameters of extern \"C\" functions __restrict__ (buffers "
                   "never overlap), so g++ drops its aliasing checks")

    def apply(self, source: str, knob_space: KnobSpace) -> tuple[str, dict[str, tuple[Any, ...]]] | None:
        try:
            functions = extern_c_functions(source)
        except SourceError:
            return None
        edits = [edit for function in functions for p in function.parameters
                 if (edit := restrict_edit(source, p.text, p.start)) is not None]
        if not edits:
            return None
        return apply_edits(source, edits), dict(knob_space)


def _innermost(source: str) -> list[Loop] | None:
    """Innermost loops a line can be put above; None when the source cannot be read."""
    try:
        return [loop for loop in for_loops(source) if loop.innermost and loop.annotatable]
    except SourceError:
        return None


def _reads_behind(loop: Loop) -> bool:
    """Whether the body indexes ``v - k`` with the loop variable ``v``: a likely recurrence."""
    if loop.variable is None:
        return True
    return re.search(r"\[\s*" + re.escape(loop.variable) + r"\s*-", loop.body) is not None


class Simd(Transformation):
    """Put ``#pragma GCC ivdep`` before innermost ``for`` loops.

    The pragma lets g++ -O3 vectorise a loop whose iterations it cannot prove independent (it
    would otherwise version the loop on run-time overlap checks, or give up). Loops that read
    behind the loop variable (``a[i - 1]``), the shape of a recurrence, are left alone.
    """

    name = "simd"
    languages = ("cpp",)
    description = ("put #pragma GCC ivdep before innermost for loops so g++ vectorises them "
                   "without dependence checks")

    def apply(self, source: str, knob_space: KnobSpace) -> tuple[str, dict[str, tuple[Any, ...]]] | None:
        loops = _innermost(source)
        if loops is None:
            return None
        targets = [loop for loop in loops if not _reads_behind(loop)
                   and not any("ivdep" in a or "omp simd" in a for a in loop.annotations)]
        if not targets:
            return None
        edits = [(loop.line_start, loop.line_start, f"{loop.indent}#pragma GCC ivdep\n")
                 for loop in targets]
        return apply_edits(source, edits), dict(knob_space)


UNROLL_KNOB = "KS_UNROLL"
UNROLL_VALUES = (1, 2, 4, 8)

# `#pragma GCC unroll KS_UNROLL` is not macro-expanded by g++, so the pragma is built with
# _Pragma and a two-level stringification. Factor 1 expands to nothing: the loop is left to the
# compiler exactly as before the rewrite.
_UNROLL_PRELUDE = f"""\
// unroll: innermost loops are unrolled {UNROLL_KNOB} times (a tuning knob; 1 = compiler's choice).
#ifndef {UNROLL_KNOB}
#define {UNROLL_KNOB} 1
#endif
#define KS_PRAGMA(text) _Pragma(#text)
#if {UNROLL_KNOB} > 1
#define KS_UNROLL_LOOP(factor) KS_PRAGMA(GCC unroll factor)
#else
#define KS_UNROLL_LOOP(factor)
#endif

"""


class Unroll(Transformation):
    """Unroll innermost loops by the knob ``KS_UNROLL`` (1, 2, 4, 8), for the tuner to choose.

    The rewritten kernel is first evaluated at factor 4; factor 1 compiles as before the rewrite.
    """

    name = "unroll"
    languages = ("cpp",)
    description = ("unroll innermost loops by a tunable factor, knob KS_UNROLL in "
                   f"{UNROLL_VALUES}")
    adds_knobs = (UNROLL_KNOB,)
    initial_knobs = MappingProxyType({UNROLL_KNOB: 4})

    def apply(self, source: str, knob_space: KnobSpace) -> tuple[str, dict[str, tuple[Any, ...]]] | None:
        if UNROLL_KNOB in knob_space or re.search(r"\bKS_(UNROLL|PRAGMA)\w*", source):
            return None
        loops = _innermost(source)
        start = code_start(source) if loops else None
        if not loops or start is None:
            return None
        targets = [loop for loop in loops if not any("unroll" in a for a in loop.annotations)]
        if not targets:
            return None
        edits = [(loop.line_start, loop.line_start,
                  f"{loop.indent}KS_UNROLL_LOOP({UNROLL_KNOB})\n") for loop in targets]
        edits.append((start, start, _UNROLL_PRELUDE))
        return apply_edits(source, edits), {**knob_space, UNROLL_KNOB: UNROLL_VALUES}


@functools.lru_cache(maxsize=1)
def host_cpu_flags() -> frozenset[str]:
    """The CPU feature flags of this host (Linux ``/proc/cpuinfo``); empty where unknown."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


TARGET_FEATURES = ("avx2", "fma")


class TargetIsa(Transformation):
    """Compile the kernel for AVX2 and FMA with ``#pragma GCC target``, where the host has them.

    The evaluator builds without ``-march`` so that a cached artifact runs anywhere; without
    this pragma g++ vectorises with 4-wide SSE2 lanes only. The rewrite reads the CPU flags of
    the host that plans, so it assumes the kernel runs on CPUs with the same features: on an
    older CPU the kernel would stop with an illegal instruction (a RUNTIME_ERROR evaluation).
    """

    name = "target_isa"
    languages = ("cpp",)
    description = ("compile for AVX2+FMA (#pragma GCC target) so the vectoriser uses 8-wide "
                   "lanes; only where this host's CPU has them")

    def apply(self, source: str, knob_space: KnobSpace) -> tuple[str, dict[str, tuple[Any, ...]]] | None:
        if not set(TARGET_FEATURES) <= host_cpu_flags():
            return None
        if re.search(r"#\s*pragma\s+GCC\s+(push_options|target)\b|__attribute__\s*\(\(\s*target",
                     source):
            return None
        try:
            start = code_start(source)
        except SourceError:
            return None
        if start is None:
            return None
        pragma = (f"// target_isa: this host has {', '.join(TARGET_FEATURES)}; use them.\n"
                  f"#pragma GCC target(\"{','.join(TARGET_FEATURES)}\")\n\n")
        return apply_edits(source, [(start, start, pragma)]), dict(knob_space)
