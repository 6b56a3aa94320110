"""Evaluations: the immutable verdict on one candidate."""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class Status(str, enum.Enum):
    """Outcome of an evaluation; only ``OK`` carries timings."""

    OK = "OK"
    COMPILE_ERROR = "COMPILE_ERROR"
    REJECTED = "REJECTED"  # static screen or anti-cheat check refused it
    RUNTIME_ERROR = "RUNTIME_ERROR"  # crash, signal, exception, CUDA error
    TIMEOUT = "TIMEOUT"
    INCORRECT = "INCORRECT"


@dataclass(frozen=True)
class ShapeResult:
    """Correctness and timing of a candidate on one shape.

    Times are microseconds. ``time_us`` and the speedups are ``nan`` when the shape was not timed
    (the evaluation stopped before timing); ``speedup_vs_compile`` is ``nan`` where
    ``torch.compile`` was not measured.
    """

    shape: str
    max_abs_err: float = math.nan
    max_rel_err: float = math.nan
    correct: bool = False
    time_us: float = math.nan
    time_spread_us: float = math.nan  # interquartile range
    samples: int = 0
    start_time_us: float = math.nan  # the task's starting kernel, timed interleaved
    eager_time_us: float = math.nan  # the PyTorch reference
    speedup_vs_start: float = math.nan
    speedup_vs_eager: float = math.nan
    speedup_vs_compile: float = math.nan
    roofline_fraction: float = math.nan  # ideal time / measured time


@dataclass(frozen=True)
class Evaluation:
    """The verdict on one candidate: a status, a message a person can act on, and per-shape data."""

    candidate_id: str
    status: Status
    message: str = ""
    shapes: tuple[ShapeResult, ...] = ()
    compile_s: float = 0.0
    eval_s: float = 0.0
    device: str = ""
    resources: Mapping[str, Any] = field(default_factory=dict)
    metrics: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def _geomean(self, field: str) -> float:
        if not self.ok or not self.shapes:
            return 0.0
        values = [getattr(s, field) for s in self.shapes]
        if any(not (v > 0) for v in values):  # nan (untimed) or non-positive: not a result
            return 0.0
        return math.exp(sum(math.log(v) for v in values) / len(values))

    @property
    def speedup(self) -> float:
        """Geometric mean over shapes of the speedup vs the starting kernel; 0 unless ``ok``."""
        return self._geomean("speedup_vs_start")

    @property
    def speedup_vs_eager(self) -> float:
        """Geometric mean over shapes of the speedup vs the PyTorch reference; 0 unless ``ok``."""
        return self._geomean("speedup_vs_eager")

    def failed_shape(self) -> ShapeResult | None:
        return next((s for s in self.shapes if not s.correct), None)


class StartingKernelFailed(RuntimeError):
    """The task's own starting kernel fails evaluation: there is nothing to search from."""

    def __init__(self, evaluation: Evaluation) -> None:
        super().__init__(f"the starting kernel fails evaluation ({evaluation.status.value}): "
                         f"{evaluation.message}")
        self.evaluation = evaluation
