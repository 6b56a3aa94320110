"""Small rewrites for cuda kernels: no aliasing, fast intrinsics, unrolled thread-strided loops."""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import Any

from kernelswarm.search import COMPUTE, MEMORY

from .clike import SourceError, apply_edits, code_start, mask, matching
from .cpp_rewrites import UNROLL_KNOB, UNROLL_VALUES, restrict_edit
from .cuda_source import DeviceFunction, device_functions, strided_loops
from .transformation import KnobSpace, Transformation

_ASSIGNED = re.compile(r"\s*(?:\+\+|--|(?:<<|>>|[-+*/%&|^])?=(?!=))")


def _only_read(masked: str, function: DeviceFunction, name: str) -> bool:
    """Whether the body uses ``name`` only as ``name[...]`` read, never written or passed on."""
    body_start, body_end = function.body_open + 1, function.body_close
    uses = list(re.finditer(rf"(?<![.\w])(?<!->){name}\b", masked[body_start:body_end]))
    if not uses:
        return False
    for use in uses:
        at = body_start + use.start()
        after = at + len(name)
        while after < body_end and masked[after].isspace():
            after += 1
        if masked[after:after + 1] != "[" or masked[:at].rstrip().endswith(("++", "--", "&", ".", ">")):
            return False
        if _ASSIGNED.match(masked, matching(masked, after) + 1):
            return False
    return True


class CudaRestrict(Transformation):
    """Mark the pointer parameters of kernels, and of device functions taking two or more
    pointers, ``__restrict__``, and ``const`` where the function only reads through them.

    The task's contract allocates outputs apart from inputs, so the buffers never overlap: the
    compiler may then keep loaded values in registers across stores, reorder loads ahead of
    stores, and read const data through the read-only cache.
    """

    name = "restrict"
    languages = ("cuda", "cute")
    stage = MEMORY
    description = ("mark kernel pointer parameters __restrict__ (and const where only read), so "
                   "loads can be reordered past stores and go through the read-only cache")

    def apply(self, source: str, knob_space: KnobSpace) -> tuple[str, dict[str, tuple[Any, ...]]] | None:
        try:
            masked = mask(source)
            functions = device_functions(source)
        except SourceError:
            return None
        edits = []
        for function in functions:
            pointers = function.pointer_parameters()
            if not (function.is_kernel or ("__device__" in function.head and len(pointers) >= 2)):
                continue
            for parameter in function.parameters:
                edit = restrict_edit(source, parameter.text, parameter.start)
                if edit is None:
                    continue
                edits.append(edit)
                name = next((n for n in pointers if re.search(rf"\b{n}\s*$", parameter.text)), None)
                if name is not None and not pointers[name] and _only_read(masked, function, name):
                    at = parameter.start + len(parameter.text) - len(parameter.text.lstrip())
                    edits.append((at, at, "const "))
        if not edits:
            return None
        return apply_edits(source, edits), dict(knob_space)


_INTRINSICS = ("expf", "logf", "exp10f", "log2f", "log10f", "sinf", "cosf", "tanf", "powf")
_MATH_CALL = re.compile(r"(?<![\w.:>])(?P<name>" + "|".join(_INTRINSICS) + r")\s*(?=\()")
_FLOAT_EVIDENCE = re.compile(r"(?<![\w.])(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?[fF]\b|\(\s*float\s*\)"
                             r"|\b(?:__)?(?:expf|logf|sqrtf|rsqrtf|fmaxf|fminf|fabsf)\s*\(")
_DOUBLE = re.compile(r"\bdouble\b|(?<![\w.])(?:\d+\.\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w.])")
_CAST = re.compile(r"\(\s*(?:float|int|unsigned|long|long\s+long)\s*\)\s*")
_SLASH = re.compile(r"(?<![/*])/(?![/=*])")
_OPERAND = re.compile(r"[A-Za-z_0-9.]+")


def _operand_after(masked: str, j: int) -> int | None:
    """End of the operand that starts at ``j`` (a cast, a name or literal, calls and subscripts,
    or a parenthesised expression); None where it is not one of these."""
    cast = _CAST.match(masked, j)
    if cast:
        j = cast.end()
    if masked[j:j + 1] == "(":
        return matching(masked, j) + 1
    name = _OPERAND.match(masked, j)
    if name is None:
        return None
    end = name.end()
    while masked[end:end + 1] in ("(", "["):
        end = matching(masked, end) + 1
    return end


def _operand_before(masked: str, j: int) -> int | None:
    """Start of the operand that ends just before ``j`` (see ``_operand_after``)."""
    k = j
    while k > 0 and masked[k - 1] in ")]":
        opener = "(" if masked[k - 1] == ")" else "["
        depth = 0
        for i in range(k - 1, -1, -1):
            depth += masked[i] in ")]"
            depth -= masked[i] in "(["
            if depth == 0:
                if masked[i] != opener:
                    return None
                k = i
                break
        else:
            return None
    m = re.search(r"[A-Za-z_0-9.]+$", masked[:k])
    start = m.start() if m else k
    return start if start < j else None


def _float_divisions(masked: str, functions: list[DeviceFunction]) -> list[tuple[int, int, int]]:
    """(dividend start, '/' offset, divisor end) of divisions provably between floats."""
    found = []
    for function in functions:
        for m in _SLASH.finditer(masked, function.body_open, function.body_close):
            left_end = m.start()
            while masked[left_end - 1].isspace():
                left_end -= 1
            right = m.end()
            while masked[right].isspace():
                right += 1
            start, end = _operand_before(masked, left_end), _operand_after(masked, right)
            if start is None or end is None:
                continue
            before = masked[:start].rstrip()[-1:]
            after = masked[end:].lstrip()[:1]
            if before in ("/", "%", ")") or after in ("/", "%"):
                continue  # precedence or a cast we cannot see through
            operands = masked[start:left_end] + " " + masked[right:end]
            if _FLOAT_EVIDENCE.search(operands) and not _DOUBLE.search(operands):
                found.append((start, m.start(), end))
    return found


class FastMath(Transformation):
    """Use the hardware's approximate intrinsics: ``expf`` -> ``__expf``, ``logf`` -> ``__logf``
    (likewise sin, cos, tan, pow, exp10, log2, log10), and ``a / b`` -> ``__fdividef(a, b)`` where
    an operand shows the division is between floats (a float literal, a ``(float)`` cast or a float
    math call) and the file uses no doubles. Errors are a few ulp: fine for 16-bit outputs."""

    name = "fast_math"
    languages = ("cuda",)
    stage = COMPUTE
    description = ("replace expf/logf/sinf/... with __expf/__logf/__sinf/... and float divisions "
                   "with __fdividef (approximate hardware instructions, a few ulp)")

    def apply(self, source: str, knob_space: KnobSpace) -> tuple[str, dict[str, tuple[Any, ...]]] | None:
        try:
            masked = mask(source)
            functions = device_functions(source)
            divisions = [] if re.search(r"\bdouble\b", masked) else _float_divisions(masked, functions)
        except (SourceError, IndexError):
            return None
        edits = [(m.start(), m.end(), "__" + m.group("name")) for m in _MATH_CALL.finditer(masked)
                 if any(f.body_open < m.start() < f.body_close for f in functions)]
        for start, slash, end in divisions:
            if any(a < slash < b for a, b, _ in edits):
                continue
            dividend = source[start:slash].rstrip()
            divisor = source[slash + 1:end].strip()
            for call in _MATH_CALL.finditer(dividend):  # calls inside move with the operands
                dividend = dividend[:call.start()] + "__" + dividend[call.start():]
            divisor = _MATH_CALL.sub(lambda c: "__" + c.group("name"), divisor)
            edits = [e for e in edits if not start <= e[0] < end]
            edits.append((start, end, f"__fdividef({dividend}, {divisor})"))
        if not edits:
            return None
        return apply_edits(source, edits), dict(knob_space)


_UNROLL_PRELUDE = f"""\
// unroll: thread-strided loops are unrolled {UNROLL_KNOB} times (a tuning knob; 1 = compiler's choice).
#ifndef {UNROLL_KNOB}
#define {UNROLL_KNOB} 1
#endif
#define KS_PRAGMA(text) _Pragma(#text)
#if {UNROLL_KNOB} > 1
#define KS_UNROLL_LOOP(factor) KS_PRAGMA(unroll factor)
#else
#define KS_UNROLL_LOOP(factor)
#endif

"""


class CudaUnroll(Transformation):
    """Unroll thread-strided loops by the knob ``KS_UNROLL`` (1, 2, 4, 8): more loads in flight
    per thread before the first is used. Factor 1 compiles as before the rewrite."""

    name = "unroll"
    languages = ("cuda", "cute")
    stage = COMPUTE
    description = ("unroll thread-strided loops by a tunable factor, knob KS_UNROLL in "
                   f"{UNROLL_VALUES}, so each thread has several loads in flight")
    adds_knobs = (UNROLL_KNOB,)
    initial_knobs = MappingProxyType({UNROLL_KNOB: 4})

    def apply(self, source: str, knob_space: KnobSpace) -> tuple[str, dict[str, tuple[Any, ...]]] | None:
        if UNROLL_KNOB in knob_space or re.search(r"\bKS_(UNROLL|PRAGMA)\w*", source):
            return None
        try:
            loops = [loop for loop in strided_loops(source) if loop.statement_start]
            start = code_start(source) if loops else None
        except SourceError:
            return None
        if not loops or start is None:
            return None
        edits = [(loop.line_start, loop.line_start, f"{loop.indent}KS_UNROLL_LOOP({UNROLL_KNOB})\n")
                 for loop in loops]
        edits.append((start, start, _UNROLL_PRELUDE))
        return apply_edits(source, edits), {**knob_space, UNROLL_KNOB: UNROLL_VALUES}
