"""Inputs and references, computed by the judge and cached within a budget of bytes.

Every problem a candidate is checked on is drawn here with the task's ``make_inputs`` and
answered with the task's ``reference``, on the evaluator's device (on a GPU, in the judge's own
CUDA context). A (shape, seed, scale) is kept in a least-recently-used cache bounded by
``budget_bytes`` (evaluators/judge/memory_plan.py sets it): a problem of 8-17 GB cannot be kept
for every seed and shape, and ``make_inputs`` is deterministic per seed, so an evicted problem
is computed again, identical. A problem larger than the whole budget is computed and not kept.
The inputs of timed copies, whose seeds are secret per evaluation, are computed on demand.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from ...search import Shape, Task
from ..correctness import clones
from ..measure.shared_memory import describe
from ..protocol import release_due
from .memory_plan import default_reference_budget

Key = tuple[str, int, float]
Problem = tuple[tuple[Any, ...], tuple[Any, ...]]
Described = tuple[tuple[tuple[str, tuple[int, ...], int], ...], ...]


def scaled(inputs: tuple, scale: float) -> tuple:
    """``inputs`` with every floating tensor multiplied by ``scale`` (in place; 1.0: unchanged)."""
    if scale != 1.0:
        for tensor in inputs:
            if getattr(tensor, "is_floating_point", lambda: False)():
                tensor.mul_(scale)
    return inputs


def nbytes(tensors: tuple) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if hasattr(t, "element_size"))


class References:
    """(shape, seed, scale) -> (inputs, reference outputs), kept while they fit the budget.

    ``hits``, ``misses`` and ``evictions`` count the cache's work (an evaluation's metrics)."""

    def __init__(self, task: Task, device: str, budget_bytes: int | None = None) -> None:
        self.task = task
        self.device = device
        self.budget_bytes = default_reference_budget(device) if budget_bytes is None \
            else budget_bytes
        self.held_bytes = 0
        self.hits = self.misses = self.evictions = 0
        self._cache: OrderedDict[Key, tuple[Problem, int]] = OrderedDict()
        self._described: dict[Key, Described] = {}
        self._templates: dict[str, tuple[Any, ...]] = {}

    def compute(self, shape: Shape, seed: int, scale: float = 1.0) -> Problem:
        """Fresh inputs and their reference (the reference runs on copies of the inputs)."""
        module = self.task.module
        inputs = scaled(tuple(module.make_inputs(dict(shape), seed, self.device)), scale)
        return inputs, tuple(module.reference(*clones(inputs)))

    def get(self, shape: Shape, seed: int, scale: float = 1.0) -> Problem:
        key = (shape.label, seed, scale)
        if key in self._cache:
            self.hits += 1
            self._cache.move_to_end(key)
            return self._cache[key][0]
        self.misses += 1
        problem = self.compute(shape, seed, scale)
        self._described[key] = (tuple(describe(problem[0])), tuple(describe(problem[1])))
        size = nbytes(problem[0]) + nbytes(problem[1])
        if size <= self.budget_bytes:
            self._cache[key] = (problem, size)
            self.held_bytes += size
            self._evict()
        return problem

    def set_budget(self, budget_bytes: int) -> None:
        """A new budget; the least recently used problems beyond it are dropped now."""
        self.budget_bytes = budget_bytes
        self._evict()

    def _evict(self) -> None:
        while self.held_bytes > self.budget_bytes and self._cache:
            _, (_, size) = self._cache.popitem(last=False)
            self.held_bytes -= size
            self.evictions += 1

    def metrics(self) -> dict[str, int]:
        """The budget and the cache's work so far (an evaluation's metrics)."""
        return {"budget_bytes": self.budget_bytes, "held_bytes": self.held_bytes,
                "hits": self.hits, "misses": self.misses, "evictions": self.evictions}

    def described(self, shape: Shape, seed: int = 0, scale: float = 1.0) -> Described:
        """(inputs, outputs) of a problem as ``shared_memory.describe`` gives them (dtype,
        shape, item size), remembered for good: sizes never need the problem kept."""
        key = (shape.label, seed, scale)
        if key not in self._described:
            self.get(shape, seed, scale)
        return self._described[key]

    def outputs_template(self, shape: Shape) -> tuple[Any, ...]:
        """The outputs the task allocates for ``shape``: their structure (type, shape, dtype,
        device), never their data; each kept as one element expanded to the shape."""
        if shape.label not in self._templates:
            made = tuple(self.task.module.make_outputs(dict(shape), self.device))
            self._templates[shape.label] = tuple(
                t.new_empty(()).expand(t.shape) if hasattr(t, "new_empty") else t for t in made)
        return self._templates[shape.label]


def release_device_memory(device: str, problem_bytes: int | None = None) -> None:
    """Hand the judge's cached free blocks back to the device (PyTorch's allocator keeps them
    otherwise) where they come to ``RELEASE_ABOVE_BYTES`` or more: a runner's buffers need the
    room the judge's draws, references and comparisons held (on a KernelBench-size problem,
    tens of GB). For a problem of ``problem_bytes`` below that, nothing is asked of the
    allocator at all: reading its figures (``memory_stats``) costs milliseconds, and a call
    per checked call added 4-7 ms to each on an H200."""
    if problem_bytes is not None and not release_due(problem_bytes):
        return
    if device.startswith("cuda"):
        import torch

        if release_due(torch.cuda.memory_reserved() - torch.cuda.memory_allocated()):
            torch.cuda.empty_cache()
