"""Geometry rewrites for cuda: more blocks per row (``split``), several rows per block (``rows``).

Both pair with the geometry knobs of the task's calling contract (docs/tasks.md): the launcher
reads ``SPLIT`` (at most that many blocks per row, along ``grid.y``) and ``ROWS`` (rows per block,
along ``threadIdx.y``). A launcher that ignores the knob leaves the grid as it was, and the
rewritten kernel then computes what it computed before: ``gridDim.y`` is 1, ``blockDim.y`` is 1.
"""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import Any

from kernelswarm.search import MEMORY

from .clike import SourceError, apply_edits, code_start, mask
from .cuda_source import SYNCHRONISING, StridedLoop, device_functions, strided_loops
from .transformation import KnobSpace, Transformation

SPLIT_KNOB, SPLIT_VALUES = "SPLIT", (1, 2, 4, 8, 16, 32, 64)
ROWS_KNOB, ROWS_VALUES = "ROWS", (1, 2, 4, 8, 16, 32)
_Y_AXIS = re.compile(r"\b(threadIdx|blockIdx|blockDim|gridDim)\s*\.\s*y\b")
_STRIDES = ("BLOCK", "blockDim.x")


def _prelude(knob: str, what: str) -> str:
    return f"#ifndef {knob}\n#define {knob} 1  // {what}; the launcher reads the same knob\n#endif\n\n"


def _plain(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _geometry_loops(source: str) -> list[StridedLoop] | None:
    """The thread-strided loops, if every one starts at ``threadIdx.x`` and strides by the block."""
    loops = strided_loops(source)
    if not loops or any(_plain(loop.start) != "threadIdx.x" or _plain(loop.stride) not in _STRIDES
                        for loop in loops):
        return None
    return loops


class SplitRows(Transformation):
    """Let several blocks share a row: thread-strided loops start at ``blockIdx.y`` blocks in and
    stride by ``gridDim.y`` blocks, and the knob ``SPLIT`` caps the blocks per row the launcher
    puts on ``grid.y``. For elementwise kernels whose rows are too few to fill the GPU.

    Declines where threads of a block cooperate (shared memory, barriers, warp shuffles, atomics)
    or use ``threadIdx`` outside the loops, since each block then no longer sees a whole row.
    """

    name = "split_rows"
    languages = ("cuda",)
    stage = MEMORY
    description = ("spread each row over up to SPLIT blocks along grid.y (elementwise kernels "
                   "with one block per row), so that a few rows still fill the GPU")
    adds_knobs = (SPLIT_KNOB,)
    initial_knobs = MappingProxyType({SPLIT_KNOB: 8})

    def apply(self, source: str, knob_space: KnobSpace) -> tuple[str, dict[str, tuple[Any, ...]]] | None:
        if SPLIT_KNOB in knob_space or re.search(rf"\b{SPLIT_KNOB}\b", source):
            return None
        try:
            masked = mask(source)
            loops = _geometry_loops(source)
            start = code_start(source)
        except SourceError:
            return None
        if (loops is None or start is None or SYNCHRONISING.search(masked)
                or _Y_AXIS.search(masked)):
            return None
        headers = [(loop.header_open, loop.header_close) for loop in loops]
        for m in re.finditer(r"\bthreadIdx\b", masked):
            if not any(a < m.start() < b for a, b in headers):
                return None
        edits = []
        for loop in loops:
            header = source[loop.header_open:loop.header_close + 1]
            stride = loop.stride.strip()
            header = re.sub(r"=\s*threadIdx\s*\.\s*x\s*;", f"= blockIdx.y * {stride} + threadIdx.x;",
                            header, count=1)
            header = re.sub(rf"\+=\s*{re.escape(loop.stride)}\s*\)$", f"+= gridDim.y * {stride})",
                            header, count=1)
            edits.append((loop.header_open, loop.header_close + 1, header))
        edits.append((start, start, _prelude(SPLIT_KNOB, "blocks per row, at most")))
        return apply_edits(source, edits), {**knob_space, SPLIT_KNOB: SPLIT_VALUES}


_ROW_FROM_BLOCK = re.compile(
    r"(?P<decl>\b(?:const\s+)?(?:long\s+long|long|int|unsigned|size_t)\s+(?P<name>[A-Za-z_]\w*)"
    r"\s*=\s*)(?P<value>(?:\(\s*long\s+long\s*\)\s*)?blockIdx\s*\.\s*x)\s*;")
_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\((?P<threads>[^(),]*(?:\([^()]*\)[^(),]*)*)\)")


class RowsPerBlock(Transformation):
    """Give a block ``ROWS`` rows: the kernel's row becomes ``blockIdx.x * blockDim.y +
    threadIdx.y`` (rows past the count return at once), thread-strided loops stride by
    ``blockDim.x`` (the launcher may narrow a block to the row's vectors) and the launch bounds
    cover ``BLOCK * ROWS`` threads. For kernels with short rows, such as one head of attention.

    Applies to kernels that take the row count as a parameter named ``rows`` and read their row
    as ``<integer> name = blockIdx.x;`` once; declines where threads of a block cooperate
    (shared memory, barriers, warp shuffles, atomics) or ``BLOCK`` is used beyond loop strides.
    """

    name = "rows_per_block"
    languages = ("cuda",)
    stage = MEMORY
    description = ("process ROWS rows per block along threadIdx.y (kernels with short rows and "
                   "one block per row), so that no thread idles past the end of its row")
    adds_knobs = (ROWS_KNOB,)
    initial_knobs = MappingProxyType({ROWS_KNOB: 8})

    def apply(self, source: str, knob_space: KnobSpace) -> tuple[str, dict[str, tuple[Any, ...]]] | None:
        if ROWS_KNOB in knob_space or re.search(rf"\b{ROWS_KNOB}\b", source):
            return None
        try:
            return self._apply(source, knob_space)
        except SourceError:
            return None

    def _apply(self, source: str, knob_space: KnobSpace) -> tuple[str, dict[str, tuple[Any, ...]]] | None:
        masked = mask(source)
        loops = _geometry_loops(source)
        start = code_start(source)
        if loops is None or start is None or SYNCHRONISING.search(masked) or _Y_AXIS.search(masked):
            return None
        functions = device_functions(source)
        kernels = [f for f in functions if f.is_kernel]
        if not kernels or len(re.findall(r"\bblockIdx\b", masked)) != len(kernels):
            return None
        edits = []
        for kernel in kernels:
            if not any(re.search(r"\b(long|int|unsigned|size_t)\b.*\brows\s*$", p.text.strip())
                       for p in kernel.parameters):
                return None
            found = _ROW_FROM_BLOCK.search(masked, kernel.body_open, kernel.body_close)
            if found is None:
                return None
            line_start = masked.rfind("\n", 0, found.start()) + 1
            indent = re.match(r"[ \t]*", source[line_start:]).group(0)
            name = found.group("name")
            edits.append((found.start("value"), found.end(),
                          f"(long long)blockIdx.x * blockDim.y + threadIdx.y;\n"
                          f"{indent}if ({name} >= rows) return;  // the last block's spare rows"))
            bounds = _LAUNCH_BOUNDS.search(masked, kernel.head_start, kernel.body_open)
            if bounds is not None:
                threads = f"({bounds.group('threads').strip()}) * {ROWS_KNOB}"
                edits.append((bounds.start("threads"), bounds.end("threads"),
                              f"{threads} < 1024 ? {threads} : 1024"))
        strides = [(loop.header_open, loop.header_close) for loop in loops]
        for m in re.finditer(r"\bBLOCK\b", masked):
            if any(a < m.start() < b for a, b in strides):
                continue
            if any(f.body_open < m.start() < f.body_close for f in functions):
                return None
        for loop in loops:
            if _plain(loop.stride) == "BLOCK":
                header = source[loop.header_open:loop.header_close + 1]
                header = re.sub(r"\+=\s*BLOCK\s*\)$", "+= blockDim.x)", header, count=1)
                edits.append((loop.header_open, loop.header_close + 1, header))
        edits.append((start, start, _prelude(ROWS_KNOB, "rows per block")))
        return apply_edits(source, edits), {**knob_space, ROWS_KNOB: ROWS_VALUES}
