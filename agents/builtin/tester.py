"""The built-in tester: the sizes and values a kernel tuned on the task's shapes gets wrong."""

from __future__ import annotations

import math
from typing import Any

from kernelswarm.search import Check, Shape, Task, Tester

LARGE_SCALE = 100.0  # inputs of magnitude ~100: overflowing exponentials, lost precision
LARGE_SCALE_HALF = 10.0  # float16 tops out at 65504; products of two 100s already overflow


def _odd(value: int) -> int:
    """An odd size near ``value`` that is not a power of two (at least 3)."""
    if value < 3:
        return 3
    return value - 1 if value % 2 == 0 else value


def _smallest(shapes: tuple[Shape, ...]) -> Shape:
    def size(shape: Shape) -> int:
        return math.prod(v for v in shape.values() if isinstance(v, int) and v > 0)
    return min(shapes, key=size)


class RuleTester(Tester):
    """Three checks derived from the task's smallest tuning shape:

    1. every integer dimension 1 (one row, one element: edge handling, empty blocks);
    2. every integer dimension odd and not a power of two (tails a vector width leaves over);
    3. the shape itself with inputs scaled by 100 (10 for float16): overflowing ``exp``, catastrophic
       rounding, anything that only holds for unit-normal values.

    A check equal to a task shape is left out. The run validates the checks against the starting
    kernel and drops any the task itself cannot pass (a size its contract does not allow).
    """

    def checks(self, task: Task, language: str) -> tuple[Check, ...]:
        if not task.tuning_shapes:
            return ()
        base = _smallest(task.tuning_shapes)
        known = {*task.tuning_shapes, *task.heldout_shapes}

        def resized(size: Any) -> dict[str, Any]:
            return {k: size(v) if isinstance(v, int) and not isinstance(v, bool) else v
                    for k, v in base.pairs}

        half = any(v == "float16" for v in base.values())
        candidates = [
            Check(resized(lambda v: 1), 1.0, "every dimension 1"),
            Check(resized(_odd), 1.0, "every dimension odd, not a power of two"),
            Check(dict(base.pairs), LARGE_SCALE_HALF if half else LARGE_SCALE,
                  "large input magnitudes"),
        ]
        out: list[Check] = []
        for check in candidates:
            if check.scale == 1.0 and Shape.of(check.shape) in known:
                continue
            if all(c.label != check.label for c in out):
                out.append(check)
        return tuple(out)
