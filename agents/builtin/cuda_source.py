"""Reading CUDA source for the cuda rewrites: function definitions and thread-strided loops.

Built on ``clike``'s masked text (comments, literals and preprocessor lines blanked, offsets kept),
so every offset found here is an offset in the source. What cannot be read with confidence raises
``SourceError``; the rewrites turn that into "does not apply".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .clike import (
    Parameter,
    declarations,
    loop_body_start,
    mask,
    matching,
    split_parameters,
    statement_end,
    statement_line,
)

_NOT_A_FUNCTION = frozenset({
    "__launch_bounds__", "__attribute__", "__declspec", "alignas", "decltype", "sizeof",
    "static_assert", "if", "for", "while", "switch", "return", "noexcept", "throw", "template",
    "__align__", "defined",
})
# Tokens a loop's start and stride may contain: the thread's place in the grid and constants.
_GEOMETRY = frozenset({"threadIdx", "blockIdx", "blockDim", "gridDim", "x", "y", "z", "BLOCK",
                       "long", "int", "unsigned"})
_INDEX_TYPE = (r"(?:const\s+)?(?:(?:unsigned|signed)\s+)?(?:long\s+long|long|int|short|size_t|"
               r"unsigned|int64_t|uint64_t|int32_t|uint32_t)(?:\s+int)?")
_STRIDED_HEADER = re.compile(
    rf"^\s*(?P<type>{_INDEX_TYPE})\s+(?P<var>[A-Za-z_]\w*)\s*=\s*(?P<start>[^;]+?)\s*;"
    r"\s*(?P=var)\s*<\s*(?P<bound>[^;]+?)\s*;\s*(?P=var)\s*\+=\s*(?P<stride>[^;]+?)\s*$", re.S)
CONTROL = re.compile(r"\b(if|for|while|do|switch|return|break|continue|goto|case)\b")
_POINTER_PARAMETER = re.compile(r"^(?P<type>[^*]*?)\*\s*(?:(?:__restrict__|__restrict|const)\s*)*"
                                r"(?P<name>[A-Za-z_]\w*)\s*$", re.S)
SYNCHRONISING = re.compile(r"__syncthreads|__syncwarp|_sync\s*\(|__shared__|\bcooperative_groups\b"
                           r"|\bcluster\b|\batomic\w*\s*\(")


@dataclass(frozen=True)
class DeviceFunction:
    """A function defined at file scope: ``__global__`` kernels and ``__device__`` helpers."""

    name: str
    head_start: int  # where its declaration starts (after the previous statement)
    head: str  # masked text from head_start to the parameter list
    parameters: tuple[Parameter, ...]
    body_open: int  # offset of the body's '{'
    body_close: int  # offset of the body's '}'

    @property
    def is_kernel(self) -> bool:
        return "__global__" in self.head

    def pointer_parameters(self) -> dict[str, bool]:
        """Pointer parameter name -> whether it points to const."""
        found: dict[str, bool] = {}
        for parameter in self.parameters:
            m = _POINTER_PARAMETER.match(parameter.text.strip())
            if m and not any(ch in parameter.text for ch in "()[]&"):
                found[m.group("name")] = re.search(r"\bconst\b", m.group("type")) is not None
        return found


def _declaration_start(masked: str, before: int) -> int:
    """Just past the ``;``, ``}`` or ``{`` that ends the previous declaration."""
    j = before - 1
    depth = 0
    while j >= 0:
        ch = masked[j]
        if ch in ")]":
            depth += 1
        elif ch in "([":
            depth -= 1
        elif depth == 0 and ch in ";{}":
            return j + 1
        j -= 1
    return 0


def device_functions(source: str) -> list[DeviceFunction]:
    """Every function defined at brace depth 0 (templates included), in source order."""
    masked = mask(source)
    found: list[DeviceFunction] = []
    for declaration in declarations(masked, _NOT_A_FUNCTION):
        if declaration.body is None:
            continue
        start = _declaration_start(masked, declaration.name_start)
        found.append(DeviceFunction(
            declaration.name, start, masked[start:declaration.parameters_open],
            split_parameters(masked, declaration.parameters_open + 1,
                             declaration.parameters_close),
            *declaration.body))
    return found


def enclosing_function(functions: list[DeviceFunction], offset: int) -> DeviceFunction | None:
    for function in functions:
        if function.body_open < offset < function.body_close:
            return function
    return None


def is_geometry(expression: str) -> bool:
    """Whether ``expression`` is built only from the thread's grid coordinates and constants."""
    if re.search(r"[^\w\s.*+()]", expression):
        return False
    return all(token in _GEOMETRY or token.isdigit() for token in re.findall(r"\w+", expression))


@dataclass(frozen=True)
class StridedLoop:
    """``for (T i = <start>; i < <bound>; i += <stride>) <body>`` with start and stride built from
    the thread's coordinates: each thread visits every stride-th index of ``[0, bound)``."""

    keyword: int  # offset of ``for``
    line_start: int
    annotation_start: int  # start of the pragma lines right above it (line_start if none)
    indent: str
    index_type: str
    variable: str
    start: str
    bound: str
    stride: str
    header_open: int  # offset of the header's '('
    header_close: int
    body_start: int  # offset of the body's '{', or of its single statement
    body_end: int  # offset just past the body
    braced: bool
    statement_start: bool  # ``for`` starts its line and follows a complete statement


def strided_loops(source: str) -> list[StridedLoop]:
    """Thread-strided ``for`` loops, in source order (the start must mention ``threadIdx.x``)."""
    masked = mask(source)
    loops: list[StridedLoop] = []
    for m in re.finditer(r"\bfor\s*\(", masked):
        open_ = m.end() - 1
        close = matching(masked, open_)
        header = _STRIDED_HEADER.match(masked[open_ + 1:close])
        if header is None:
            continue
        start, stride = header.group("start"), header.group("stride")
        if "threadIdx.x" not in re.sub(r"\s+", "", start) or not is_geometry(start):
            continue
        if not is_geometry(stride) or "threadIdx" in stride:
            continue
        body = loop_body_start(masked, m.start(), close)
        braced = masked[body] == "{"
        if braced:
            end = matching(masked, body) + 1
        elif CONTROL.match(masked, body):
            continue  # a loop whose body is another statement with its own body: not read here
        else:
            end = statement_end(masked, body)
        line = statement_line(source, masked, m.start())
        loops.append(StridedLoop(
            m.start(), line.line_start, line.annotation_start, line.indent,
            " ".join(header.group("type").split()), header.group("var"), header.group("start"),
            header.group("bound"), stride, open_, close, body, end, braced, line.statement_start))
    return loops
