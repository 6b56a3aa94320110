"""Evaluations: the immutable verdict on one candidate."""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from .measured import BaselineSource, EvaluationCost, KernelResources, MachineFigures, Profile


class Status(str, enum.Enum):
    """Outcome of an evaluation; only ``OK`` carries timings."""

    OK = "OK"
    COMPILE_ERROR = "COMPILE_ERROR"
    REJECTED = "REJECTED"  # static screen or anti-cheat check refused it
    RUNTIME_ERROR = "RUNTIME_ERROR"  # crash, signal, exception, CUDA error
    TIMEOUT = "TIMEOUT"
    INCORRECT = "INCORRECT"
    # correct, but slower than its lineage's best on every screening shape: timed on those
    # only (search/screening.py); never a best, an elite or a repair's subject
    SCREENED_OUT = "SCREENED_OUT"


@dataclass(frozen=True)
class ShapeResult:
    """Correctness and timing of a candidate on one shape.

    Times are microseconds. ``time_us`` and the speedups are ``nan`` when the shape was not timed
    (the evaluation stopped before timing); ``speedup_vs_compile`` is ``nan`` where
    ``torch.compile`` was not measured. Baselines (evaluators/baselines/baselines.py): eager PyTorch,
    ``torch.compile`` specialised for the shape, library kernels; ``best_baseline`` names the
    fastest, and ``speedup_vs_best`` is over it. Each ``*_spread_us`` is an interquartile range
    of timed calls; each ``*_ci`` the half-width of the speedup's 95% confidence interval (from
    the standard errors of both medians). Fields added later default to NaN or "" so that older
    records still read.
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
    start_spread_us: float = math.nan
    eager_spread_us: float = math.nan
    compile_time_us: float = math.nan  # torch.compile(dynamic=False) of the reference, best mode
    compile_spread_us: float = math.nan
    best_baseline: str = ""  # "eager", "compile" or an anchor's name, e.g. "liger"
    best_baseline_us: float = math.nan
    best_baseline_spread_us: float = math.nan
    speedup_vs_best: float = math.nan
    speedup_vs_start_ci: float = math.nan
    speedup_vs_eager_ci: float = math.nan
    speedup_vs_compile_ci: float = math.nan
    speedup_vs_best_ci: float = math.nan


_SE_MEDIAN = math.sqrt(math.pi / 2) / 1.349  # standard error of a median per (IQR / sqrt(n))
Z95 = 1.96


def median_rel_se(median: float, iqr: float, samples: int) -> float:
    """Relative standard error of a median from its samples' IQR (normal theory, robust sigma);
    NaN when unknown."""
    if not (median > 0) or not (iqr >= 0) or samples < 4:
        return math.nan
    return _SE_MEDIAN * iqr / math.sqrt(samples) / median


def speedup_ci(base: tuple[float, float, int], mine: tuple[float, float, int]) -> float:
    """Half-width of the 95% confidence interval of ``base / mine`` (each (median, IQR, samples));
    NaN when either spread is unknown."""
    a, b = median_rel_se(*base), median_rel_se(*mine)
    if math.isnan(a) or math.isnan(b) or not (mine[0] > 0):
        return math.nan
    return Z95 * (base[0] / mine[0]) * math.hypot(a, b)


@dataclass(frozen=True)
class Evaluation:
    """The verdict on one candidate: a status, a message a person can act on, and per-shape data.

    Anything a program decides on is a typed field (search/measured.py), filled by the evaluator
    where it was measured and empty otherwise: ``binary`` (the built binary's content hash:
    candidates with the same one share a verdict), ``kernel_resources`` (registers, spills, per
    kernel), ``machine`` (the roofline's figures), ``baselines`` (where the baselines came from),
    ``dropped_checks`` (extra checks the starting kernel fails, label -> why), ``profile``
    (torch.profiler launches, Nsight Compute counters), ``cost`` (where the evaluation's time
    went) and ``reused_from`` (set by the tracker: the candidate whose verdict this is).
    ``resources`` and ``metrics`` are free-form detail for display and logs (launch geometry,
    timing settings and details, isolation levels, ...): read by no program by key.
    """

    candidate_id: str
    status: Status
    message: str = ""
    shapes: tuple[ShapeResult, ...] = ()
    compile_s: float = 0.0
    eval_s: float = 0.0
    device: str = ""
    resources: Mapping[str, Any] = field(default_factory=dict)
    metrics: Mapping[str, Any] = field(default_factory=dict)
    binary: str = ""
    kernel_resources: tuple[KernelResources, ...] = ()
    machine: MachineFigures | None = None
    baselines: BaselineSource | None = None
    dropped_checks: Mapping[str, str] = field(default_factory=dict)
    profile: Profile | None = None
    cost: EvaluationCost | None = None
    reused_from: str = ""

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

    @cached_property  # archives sort by it on every record
    def speedup(self) -> float:
        """Geometric mean over shapes of the speedup vs the starting kernel; 0 unless ``ok``."""
        return self._geomean("speedup_vs_start")

    @property
    def speedup_vs_eager(self) -> float:
        """Geometric mean over shapes of the speedup vs the PyTorch reference; 0 unless ``ok``."""
        return self._geomean("speedup_vs_eager")

    @property
    def speedup_vs_compile(self) -> float:
        """Geometric mean over shapes of the speedup vs ``torch.compile``; 0 unless measured."""
        return self._geomean("speedup_vs_compile")

    @property
    def speedup_vs_best(self) -> float:
        """Geometric mean over shapes of the speedup vs each shape's best baseline; 0 unless
        every shape has one."""
        return self._geomean("speedup_vs_best")

    def geomean_ci(self, field: str = "speedup_vs_start") -> float:
        """Half-width of the 95% confidence interval of the geometric mean of ``field`` (the
        shapes' relative errors combined); NaN when a shape's is unknown."""
        value = self._geomean(field)
        if not value > 0:
            return math.nan
        relative = [getattr(s, f"{field}_ci") / getattr(s, field) for s in self.shapes]
        if any(math.isnan(r) for r in relative):
            return math.nan
        return value * math.sqrt(sum(r * r for r in relative)) / len(relative)

    @property
    def timing_rel_se(self) -> float:
        """Relative standard error of the geometric mean of this kernel's shape times (from
        each shape's IQR and samples); NaN when unknown."""
        if not self.ok or not self.shapes:
            return math.nan
        errors = [median_rel_se(s.time_us, s.time_spread_us, s.samples) for s in self.shapes]
        if any(math.isnan(e) for e in errors):
            return math.nan
        return math.sqrt(sum(e * e for e in errors)) / len(errors)

    def failed_shape(self) -> ShapeResult | None:
        return next((s for s in self.shapes if not s.correct), None)

    def as_own_start(self) -> Evaluation:
        """This verdict as the starting kernel's own: over itself it is 1.0 on every shape,
        exactly, with no interval. Timed against itself, a measured ratio is noise that would
        read as a gain or a loss (a run whose best is its start reported 1.035x)."""
        if not self.ok:
            return self
        return replace(self, shapes=tuple(
            replace(s, speedup_vs_start=1.0, speedup_vs_start_ci=math.nan) for s in self.shapes))


def clearly_faster(new: Evaluation, old: Evaluation, z: float = Z95) -> bool:
    """Whether ``new``'s speedup beats ``old``'s by more than the timing noise of both (``z``
    standard errors of the difference of the log speedups). Where a spread is unknown, any
    larger speedup counts."""
    if not new.ok or new.speedup <= 0:
        return False
    if not old.ok or old.speedup <= 0:
        return True
    noise = math.hypot(new.timing_rel_se, old.timing_rel_se)
    if math.isnan(noise):
        return new.speedup > old.speedup
    return math.log(new.speedup / old.speedup) > z * noise


class StartingKernelFailed(RuntimeError):
    """The task's own starting kernel fails evaluation (``evaluation``, its verdict): there is
    nothing to search from, and nothing to compare another kernel with."""

    def __init__(self, evaluation: Evaluation) -> None:
        super().__init__(f"the starting kernel fails evaluation ({evaluation.status.value}): "
                         f"{evaluation.message}")
        self.evaluation = evaluation

    def __reduce__(self) -> tuple[type[StartingKernelFailed], tuple[Evaluation]]:
        # rebuilt from its verdict in another process (raised in an evaluation worker)
        return type(self), (self.evaluation,)
