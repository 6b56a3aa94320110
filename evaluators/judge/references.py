"""Inputs and references, computed by the judge and cached for the evaluator's lifetime.

Every problem a candidate is checked on is drawn here with the task's ``make_inputs`` and
answered with the task's ``reference``, on the evaluator's device (on a GPU, in the judge's own
CUDA context). A (shape, seed, scale) is computed once and reused for every candidate; the
inputs of timed copies, whose seeds are secret per evaluation, are computed on demand.
"""

from __future__ import annotations

from typing import Any

from ...search.task import Shape, Task
from ..correctness import clones


def scaled(inputs: tuple, scale: float) -> tuple:
    """``inputs`` with every floating tensor multiplied by ``scale`` (in place; 1.0: unchanged)."""
    if scale != 1.0:
        for tensor in inputs:
            if getattr(tensor, "is_floating_point", lambda: False)():
                tensor.mul_(scale)
    return inputs


class References:
    """(shape, seed, scale) -> (inputs, reference outputs), each computed once."""

    def __init__(self, task: Task, device: str) -> None:
        self.task = task
        self.device = device
        self._cache: dict[tuple[str, int, float], tuple[tuple[Any, ...], tuple[Any, ...]]] = {}
        self._templates: dict[str, tuple[Any, ...]] = {}

    def compute(self, shape: Shape, seed: int, scale: float = 1.0
                ) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """Fresh inputs and their reference (the reference runs on copies of the inputs)."""
        module = self.task.module
        inputs = scaled(tuple(module.make_inputs(dict(shape), seed, self.device)), scale)
        return inputs, tuple(module.reference(*clones(inputs)))

    def get(self, shape: Shape, seed: int, scale: float = 1.0
            ) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        key = (shape.label, seed, scale)
        if key not in self._cache:
            self._cache[key] = self.compute(shape, seed, scale)
        return self._cache[key]

    def outputs_template(self, shape: Shape) -> tuple[Any, ...]:
        """The outputs the task allocates for ``shape`` (their structure, never their data)."""
        if shape.label not in self._templates:
            self._templates[shape.label] = tuple(
                self.task.module.make_outputs(dict(shape), self.device))
        return self._templates[shape.label]
