"""``vectorize`` for cuda: thread-strided loops move ``VEC`` consecutive elements per thread.

A loop ``for (T i = <start>; i < n; i += <stride>)`` whose body touches arrays only at
``p[X + i]`` (or ``p[i]``), or hands ``p + X + i`` to a function, with ``X`` unchanged by the
body, becomes

    if (n % VEC == 0 && every p + X is aligned to the vector) {
        for (T v = <start>; v < n / VEC; v += <stride>) {
            load one VEC-wide vector per array read; for each of the VEC lanes, the old body on
            the lanes; store one vector per array written
        }
    } else { the original loop }

so every shape stays correct (odd sizes and misaligned rows take the original loop), and a row
of 16-bit elements moves in 16-byte accesses at ``VEC = 8``. A non-const array is stored only
where the body writes it and loaded too where the body might read it: a plain ``p[X + i] = e``,
or a function whose every definition only assigns ``*param``, writes without reading.

It declines when unsure: any other use of ``i``, control flow or synchronisation in the body, an
offset the body changes, a pointer the body reassigns, a loop that is not a statement of its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from kernelswarm.search import MEMORY

from .clike import SourceError, apply_edits, code_start, mask, matching
from .cuda_source import (
    CONTROL,
    SYNCHRONISING,
    DeviceFunction,
    StridedLoop,
    device_functions,
    enclosing_function,
    strided_loops,
)
from .transformation import KnobSpace, Transformation

VEC_KNOB = "VEC"
VEC_VALUES = (1, 2, 4, 8)

PRELUDE = f"""\
// vectorize: thread-strided loops move {VEC_KNOB} consecutive elements per thread with one aligned
// vector access per array, where the row length and alignment allow ({VEC_KNOB} = 1: as before).
#ifndef {VEC_KNOB}
#define {VEC_KNOB} 1
#endif
template <typename T, int N> struct alignas(sizeof(T) * N) ks_vec {{ T v[N]; }};
template <int N, typename T> __device__ __forceinline__ ks_vec<T, N> ks_load(const T* p) {{
    return *reinterpret_cast<const ks_vec<T, N>*>(p);
}}
template <int N, typename T> __device__ __forceinline__ void ks_store(T* p, const ks_vec<T, N>& v) {{
    *reinterpret_cast<ks_vec<T, N>*>(p) = v;
}}
template <int N, typename T> __device__ __forceinline__ bool ks_aligned(const T* p) {{
    return reinterpret_cast<unsigned long long>(p) % sizeof(ks_vec<T, N>) == 0;
}}
// end vectorize

"""

_LOCAL_POINTER = re.compile(
    r"(?:^|(?<=[;{}]))\s*(?P<type>(?:const\s+)?[A-Za-z_][\w:]*(?:\s+const)?)\s*\*\s*"
    r"(?:(?:__restrict__|__restrict|const)\s+)*(?P<name>[A-Za-z_]\w*)\s*=(?!=)")
_SUBSCRIPT = re.compile(r"(?<![\w.>])(?P<name>[A-Za-z_]\w*)\s*\[")
_ASSIGNMENT = re.compile(r"\s*(?P<op>(?:<<|>>|[-+*/%&|^])?=)(?!=)")
_LOW_PRECEDENCE = re.compile(r"[<>=?&|^,:]")


class _Decline(Exception):
    """The loop cannot be vectorised with confidence."""


@dataclass
class _Stream:
    """One vector per (array, offset): loaded before the lanes, stored after them."""

    pointer: str
    offset: str  # source text of X ("" for p[i])
    name: str
    read: bool = False
    written: bool = False


@dataclass
class _Body:
    edits: list[tuple[int, int, str]] = field(default_factory=list)
    streams: dict[tuple[str, str], _Stream] = field(default_factory=dict)


def _split_terms(text: str) -> list[str]:
    """``text`` split on its top-level binary ``+``; raises where a lower-precedence operator or
    an unbalanced bracket makes that split wrong."""
    terms, depth, begin = [], 0, 0
    for j, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0 and _LOW_PRECEDENCE.match(ch):
            raise _Decline(f"operator {ch!r} in {text.strip()!r}")
        elif depth == 0 and ch == "+" and text[:j].strip() and text[:j].rstrip()[-1] not in "+-*/%":
            terms.append(text[begin:j])
            begin = j + 1
    if depth != 0:
        raise _Decline(f"unbalanced {text!r}")
    terms.append(text[begin:])
    return [t.strip() for t in terms]


def _offset_of(terms: list[str], variable: str) -> str:
    """The terms other than ``variable``, joined: the loop-invariant offset X of ``X + i``."""
    mentions = [t for t in terms if re.search(rf"\b{variable}\b", t)]
    if mentions != [variable]:
        raise _Decline(f"index {' + '.join(terms)!r} is not X + {variable}")
    return " + ".join(t for t in terms if t != variable)


def _write_only_parameter(functions: list[DeviceFunction], masked: str, callee: str,
                          position: int) -> bool:
    """Whether every definition of ``callee`` only assigns through its parameter at ``position``."""
    definitions = [f for f in functions if f.name == callee]
    if not definitions:
        return False
    for function in definitions:
        if position >= len(function.parameters):
            return False
        pointers = function.pointer_parameters()
        names = [n for n in pointers if re.search(rf"\b{n}\b", function.parameters[position].text)]
        if len(names) != 1 or pointers[names[0]]:
            return False
        body = masked[function.body_open + 1:function.body_close]
        uses = list(re.finditer(rf"\b{names[0]}\b", body))
        writes = re.findall(rf"\*\s*{names[0]}\s*=(?!=)", body)
        if CONTROL.search(body) or not uses or len(writes) != len(uses):
            return False
    return True


class _LoopReader:
    """Reads one loop's body into the edits and streams of its vector version."""

    def __init__(self, source: str, masked: str, loop: StridedLoop, functions: list[DeviceFunction],
                 pointers: dict[str, bool], tag: str) -> None:
        self.source, self.masked, self.loop = source, masked, loop
        self.functions, self.pointers, self.tag = functions, pointers, tag
        self.body = masked[loop.body_start:loop.body_end]
        self.result = _Body()

    def stream(self, pointer: str, offset: str) -> _Stream:
        key = (pointer, re.sub(r"\s+", "", offset))
        if key not in self.result.streams:
            self.result.streams[key] = _Stream(pointer, offset,
                                               f"ks_{self.tag}_{len(self.result.streams)}")
        return self.result.streams[key]

    def read(self) -> _Body:
        body, variable = self.body, self.loop.variable
        if CONTROL.search(body) or SYNCHRONISING.search(body) or "volatile" in body:
            raise _Decline("control flow or synchronisation in the body")
        self._check_unchanged()
        handled: list[tuple[int, int]] = []
        for m in _SUBSCRIPT.finditer(body):
            close = matching(body, m.end() - 1)
            index = body[m.end():close]
            if not re.search(rf"\b{variable}\b", index):
                continue
            handled.append(self._subscript(m, close, index))
        for m in re.finditer(rf"\b{variable}\b", body):
            if not any(start <= m.start() < end for start, end in handled):
                handled.append(self._argument(m.start()))
        return self.result

    def _check_unchanged(self) -> None:
        for name in re.findall(r"[A-Za-z_]\w*", self.body):
            if re.search(rf"(?:\+\+|--)\s*{name}\b|\b{name}\s*(?:\+\+|--|(?:<<|>>|[-+*/%&|^])?=(?!=))",
                         self.body) and (name in self.pointers or name == self.loop.variable):
                raise _Decline(f"{name} is changed in the body")

    def _invariant(self, offset: str) -> None:
        for name in set(re.findall(r"\b[A-Za-z_]\w*\b", offset)):
            declared = re.search(rf"[\w>*&]\s+{name}\s*[=;,\[]", self.body)
            changed = re.search(rf"(?:\+\+|--)\s*{name}\b|\b{name}\s*(?:\+\+|--|"
                                r"(?:<<|>>|[-+*/%&|^])?=(?!=))", self.body)
            if declared or changed:
                raise _Decline(f"offset {offset!r} changes in the body")

    def _subscript(self, m: re.Match[str], close: int, index: str) -> tuple[int, int]:
        pointer = m.group("name")
        if pointer not in self.pointers:
            raise _Decline(f"{pointer} is not a pointer the loop can see")
        offset = _offset_of(_split_terms(index), self.loop.variable)
        self._invariant(offset)
        stream = self.stream(pointer, offset)
        after = self.body[close + 1:]
        if re.match(r"\s*(?:\.|->|\[)", after):
            raise _Decline(f"{pointer}[...] is not a plain element")
        before = self.body[:m.start()].rstrip()
        assignment = _ASSIGNMENT.match(after)
        if before.endswith(("++", "--")) or re.match(r"\s*(?:\+\+|--)", after):
            stream.read = stream.written = True
        elif assignment and assignment.group("op") == "=":
            stream.written = True
        elif assignment:
            stream.read = stream.written = True
        else:
            stream.read = True
        start = self.loop.body_start + m.start()
        self.result.edits.append((start, self.loop.body_start + close + 1,
                                  f"{stream.name}.v[ks_j]"))
        return m.start(), close + 1

    def _argument(self, at: int) -> tuple[int, int]:
        """``p + X + i`` as a whole argument of a call: the lane's address in the vector."""
        body = self.body
        begin = at
        depth = 0
        while begin > 0:
            ch = body[begin - 1]
            if ch in ")]":
                depth += 1
            elif ch in "([" and depth:
                depth -= 1
            elif ch in "(," and depth == 0:
                break
            elif ch in ";{}=":
                raise _Decline(f"{self.loop.variable} outside a subscript or an argument")
            begin -= 1
        end = at
        depth = 0
        while end < len(body):
            ch = body[end]
            if ch in "([":
                depth += 1
            elif ch in ")]" and depth:
                depth -= 1
            elif ch in "),":
                break
            elif ch in ";{}":
                raise _Decline("unterminated argument")
            end += 1
        if begin == 0:
            raise _Decline("argument outside a call")
        opening = begin - 1 if body[begin - 1] == "(" else self._previous_open(begin - 1)
        callee = re.search(r"([A-Za-z_]\w*)\s*$", body[:opening])
        if callee is None or CONTROL.fullmatch(callee.group(1)) or callee.group(1) == "sizeof":
            raise _Decline("pointer arithmetic outside a call")
        terms = _split_terms(body[begin:end])
        pointer = terms[0]
        if pointer not in self.pointers:
            raise _Decline(f"{pointer} is not a pointer the loop can see")
        offset = _offset_of(terms[1:], self.loop.variable)
        self._invariant(offset)
        stream = self.stream(pointer, offset)
        position = body[opening + 1:begin].count(",") - self._nested_commas(opening + 1, begin)
        if self.pointers[pointer]:
            stream.read = True
        elif _write_only_parameter(self.functions, self.masked, callee.group(1), position):
            stream.written = True
        else:
            stream.read = stream.written = True
        start = self.loop.body_start + begin
        lead = len(body[begin:end]) - len(body[begin:end].lstrip())
        trail = len(body[begin:end]) - len(body[begin:end].rstrip())
        self.result.edits.append((start + lead, self.loop.body_start + end - trail,
                                  f"&{stream.name}.v[ks_j]"))
        return begin, end

    def _previous_open(self, j: int) -> int:
        """Offset of the ``(`` enclosing the argument that ends at the ``,`` at ``j``."""
        depth = 0
        j -= 1
        while j >= 0:
            ch = self.body[j]
            if ch in ")]":
                depth += 1
            elif ch in "([":
                if depth == 0:
                    return j
                depth -= 1
            j -= 1
        raise _Decline("argument outside a call")

    def _nested_commas(self, start: int, end: int) -> int:
        count, depth = 0, 0
        for ch in self.body[start:end]:
            if ch in "([":
                depth += 1
            elif ch in ")]":
                depth -= 1
            elif ch == "," and depth:
                count += 1
        return count


def _pointers_in_scope(masked: str, function: DeviceFunction, before: int) -> dict[str, bool]:
    pointers = function.pointer_parameters()
    for m in _LOCAL_POINTER.finditer(masked, function.body_open + 1, before):
        pointers[m.group("name")] = re.search(r"\bconst\b", m.group("type")) is not None
    return pointers


def _address(stream: _Stream, base: str | None) -> str:
    parts = [stream.pointer] + ([f"({stream.offset})"] if stream.offset else []) + (
        [base] if base else [])
    return " + ".join(parts)


def _indented(text: str, by: str) -> str:
    """``text`` with every line after the first moved right by ``by``."""
    return text.replace("\n", "\n" + by)


def _vector_loop(source: str, loop: StridedLoop, body: _Body, tag: str) -> str:
    """The text that replaces the loop: vector loop under the guard, the original as fallback."""
    ind = loop.indent
    index_type = re.sub(r"^const\s+", "", loop.index_type)
    vector, base = f"ks_{tag}_v", f"ks_{tag}_base"
    streams = list(body.streams.values())
    checks = [f"({loop.bound}) % {VEC_KNOB} == 0"] + [
        f"ks_aligned<{VEC_KNOB}>({_address(s, None)})" for s in streams]
    annotations = [f"{ind}    {line.strip()}" for line in
                   source[loop.annotation_start:loop.line_start].splitlines() if line.strip()]
    lines = [f"#if {VEC_KNOB} > 1", f"{ind}if ({' && '.join(checks)}) {{", *annotations,
             f"{ind}    for ({index_type} {vector} = {loop.start}; {vector} < ({loop.bound}) / "
             f"{VEC_KNOB}; {vector} += {loop.stride}) {{",
             f"{ind}        const {index_type} {base} = {vector} * {VEC_KNOB};"]
    for s in streams:
        if s.read:
            qualifier = "" if s.written else "const "
            lines.append(f"{ind}        {qualifier}auto {s.name} = ks_load<{VEC_KNOB}>"
                         f"({_address(s, base)});")
        else:
            lines.append(f"{ind}        decltype(ks_load<{VEC_KNOB}>({s.pointer})) {s.name};")
    text = apply_edits(source[loop.body_start:loop.body_end],
                       [(a - loop.body_start, b - loop.body_start, t) for a, b, t in body.edits])
    lanes = text if loop.braced else "{ " + text + " }"
    lines += [f"{ind}        #pragma unroll",
              f"{ind}        for (int ks_j = 0; ks_j < {VEC_KNOB}; ++ks_j) {_indented(lanes, '        ')}"]
    lines += [f"{ind}        ks_store<{VEC_KNOB}>({_address(s, base)}, {s.name});"
              for s in streams if s.written]
    lines += [f"{ind}    }}", f"{ind}}} else", "#endif", f"{ind}{{"]
    original = "".join(line + "\n" for line in annotations) + "    " + _indented(
        source[loop.line_start:loop.body_end], "    ")
    return "\n".join(lines) + "\n" + original + f"\n{ind}}}"


class Vectorize(Transformation):
    """Move ``VEC`` consecutive elements per thread in thread-strided loops, with aligned vector
    loads and stores and a run-time fallback to the original loop (see the module docstring)."""

    name = "vectorize"
    languages = ("cuda",)
    stage = MEMORY
    description = ("make thread-strided loops move VEC (1, 2, 4, 8) consecutive elements per "
                   "thread with one aligned vector load/store per array, falling back to the "
                   "original loop where the length or alignment does not allow it")
    adds_knobs = (VEC_KNOB,)
    initial_knobs = MappingProxyType({VEC_KNOB: 8})

    def apply(self, source: str, knob_space: KnobSpace) -> tuple[str, dict[str, tuple[Any, ...]]] | None:
        if VEC_KNOB in knob_space or re.search(r"\bks_(load|store|vec|aligned)\b|\bVEC\b", source):
            return None
        try:
            edits = self._edits(source)
            start = code_start(source)
        except (SourceError, IndexError):
            return None
        if not edits or start is None:
            return None
        edits.append((start, start, PRELUDE))
        return apply_edits(source, edits), {**knob_space, VEC_KNOB: VEC_VALUES}

    @staticmethod
    def _edits(source: str) -> list[tuple[int, int, str]]:
        masked = mask(source)
        functions = device_functions(source)
        edits = []
        for number, loop in enumerate(strided_loops(source)):
            function = enclosing_function(functions, loop.keyword)
            if function is None or not loop.statement_start:
                continue
            tag = f"v{number}"
            pointers = _pointers_in_scope(masked, function, loop.keyword)
            try:
                body = _LoopReader(source, masked, loop, functions, pointers, tag).read()
            except _Decline:
                continue
            if not body.streams:
                continue
            replacement = _vector_loop(source, loop, body, tag)
            edits.append((loop.annotation_start, loop.body_end, replacement))
        return edits
