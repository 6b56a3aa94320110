"""What the judge knows before any candidate, and what it derives from a candidate's times.

``Calibration`` is measured once per evaluator, in a runner that never loads candidate code:
the machine's figures (bandwidth, flops), the baselines (``acquire_baselines``: eager PyTorch,
``torch.compile`` per shape and library kernels, measured in their own trusted process by
evaluators/baselines/baselines.py, or read from its cache), and the starting kernel timed through the candidates' own protocol (the
canary and the null batch's cost, evaluators/judge/timing.py). ``derive_shape_figures`` turns a
shape's times into speedups and the fraction of the roofline; ``roofline_verdict`` refuses a
speedup the machine cannot deliver.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ...search import BaselineSource, Shape, ShapeResult, Status, Task, speedup_ci
from ..baselines.baselines import (
    COMPILE,
    EAGER,
    BaselineError,
    BaselineTable,
    measure_baselines,
    with_baselines,
)
from ..measure.machine import MachineFigures
from ..settings import EvaluatorSettings
from .timing import CleanFigures
from .trial import Trial

ROOFLINE_MARGIN = 1.5
# A timed call reported faster than this share of the machine's smallest kernel call (an
# empty-ish kernel replayed in a CUDA graph) is not a real call: the noise of a median is far
# smaller than the half left out.
LAUNCH_FLOOR_SHARE = 0.5


@dataclass(frozen=True)
class Baselines:
    """Per tuning shape label, the times (us) a speedup is taken against; NaN: not measured.
    ``table``: every baseline (evaluators/baselines/baselines.py), None with ``error`` when it could not
    be measured."""

    eager_us: Mapping[str, float] = field(default_factory=dict)
    compile_us: Mapping[str, float] = field(default_factory=dict)
    table: BaselineTable | None = None
    error: str = ""

    def source(self) -> BaselineSource:
        """Where the baselines came from, for ``Evaluation.baselines``: the table's device, key,
        what was skipped and why (or why there are none)."""
        if self.table is None:
            return BaselineSource(error=self.error)
        t = self.table
        return BaselineSource(device=t.device, key=t.key, cached=t.cached,
                              skipped=dict(t.skipped), versions=dict(t.versions))


@dataclass(frozen=True)
class Calibration:
    machine: MachineFigures
    baselines: Baselines
    clean: dict[str, CleanFigures]  # per tuning shape label (``remeasured`` replaces one)
    checks: tuple[dict[str, Any], ...]  # the extra checks the starting kernel passes
    dropped_checks: Mapping[str, str]  # label -> why
    flush_bytes: int
    cached: bool = False  # read from the calibration cache (evaluators/judge/calibration_cache.py)

    def remeasured(self, label: str, clean: CleanFigures) -> None:
        """``clean`` replaces shape ``label``'s clean figures for the evaluator's life (the
        cache keeps the calibration's): the starting kernel timed again in a runner without
        candidate code, after a canary disagreed with the calibration's figures."""
        self.clean[label] = clean


def _machine(raw: Any) -> MachineFigures:
    """The calibration runner's machine figures (no candidate code ran there), typed."""
    if not isinstance(raw, dict):
        raise ValueError("the calibration runner sent no machine figures")
    figures = MachineFigures(**raw)
    for name in ("copy_bandwidth_gbs", "peak_gflops"):
        value = getattr(figures, name)
        if not isinstance(value, (int, float)) or not value > 0 or not math.isfinite(value):
            raise ValueError(f"the calibration runner measured {name}={value!r}")
    return figures


def acquire_baselines(calibration_trial: Trial, task: Task, settings: EvaluatorSettings,
                      language: str) -> tuple[MachineFigures, Baselines]:
    """BASELINES CALL POINT: the machine (from the calibration runner, which never holds
    candidate code) and the baselines every speedup is taken against: eager PyTorch,
    ``torch.compile`` per shape and the task's library kernels, measured by
    ``measure_baselines`` in a process of their own with this evaluator's timing settings (or
    read from its cache), with the starting kernel in ``language`` timed alongside them (it
    carries them over to each evaluation). One call per evaluator; a failure leaves NaN and the
    reason."""
    reply = calibration_trial.ask({"type": "calibrate"}, "calibrated")
    machine = _machine(reply.get("machine"))
    try:
        table = measure_baselines(task, settings, language=language)
    except BaselineError as exc:
        nan = {s.label: math.nan for s in task.tuning_shapes}
        return machine, Baselines(eager_us=nan, compile_us=nan, error=str(exc)[-2000:])
    return machine, Baselines(
        eager_us={s.label: table.get(s.label, EAGER).median_us for s in task.tuning_shapes},
        compile_us={s.label: table.get(s.label, COMPILE).median_us
                    for s in task.tuning_shapes}, table=table)


def derive_shape_figures(result: ShapeResult, shape: Shape, roofline: tuple[float, float],
                         machine: MachineFigures, baselines: Baselines) -> ShapeResult:
    """Speedups over the starting kernel and the baselines, and the fraction of the roofline,
    for a timed ``result`` of ``shape`` (``roofline``: the task's bytes and flops)."""
    ideal_us = machine.ideal_seconds(*roofline) * 1e6
    mine = (result.time_us, result.time_spread_us, result.samples)
    start = (result.start_time_us, result.start_spread_us, result.samples)  # timed interleaved
    derived = replace(result, speedup_vs_start=result.start_time_us / result.time_us,
                      speedup_vs_start_ci=speedup_ci(start, mine),
                      roofline_fraction=ideal_us / result.time_us)
    return with_baselines(derived, baselines.table)  # eager, compile, the best baseline


def own_floor_us(machine: MachineFigures) -> float:
    """What no real call undercuts (us): ``LAUNCH_FLOOR_SHARE`` of the smallest kernel call the
    machine was measured to replay (``MachineFigures.launch_floor_us``, GPU); 0 where it is not
    known. The other floor of every shape, its roofline time, is ``roofline_verdict``'s (a
    verdict that names the roofline)."""
    if math.isfinite(machine.launch_floor_us):
        return machine.launch_floor_us * LAUNCH_FLOOR_SHARE
    return 0.0


def roofline_bound(moved_bytes: float, flops: float, machine: MachineFigures,
                   flushed: bool) -> str:
    """Which limit a shape's roofline fraction is taken against: "compute" (peak flops) or
    "memory" (the copy bandwidth beyond the last-level cache); "cache" when neither bounds it:
    with a warm cache (``flushed`` False) a memory-bound shape whose data fits in the
    last-level cache is served from it, faster than that bandwidth, so a fraction of the
    memory roofline says nothing there (it may well exceed 100%)."""
    memory_s = moved_bytes / (machine.copy_bandwidth_gbs * 1e9)
    compute_s = flops / (machine.peak_gflops * 1e9)
    if compute_s >= memory_s:
        return "compute"
    return "cache" if not flushed and moved_bytes <= machine.llc_bytes else "memory"


def roofline_verdict(shapes: tuple[ShapeResult, ...], flushed: bool,
                     message: str) -> tuple[Status, str]:
    """REJECTED when a shape beats the roofline by more than the margin (flushed caches only:
    without a flush a small shape may be served from cache)."""
    if not flushed:
        return Status.OK, message
    for s in shapes:
        if s.roofline_fraction > ROOFLINE_MARGIN:
            return Status.REJECTED, (
                f"shape {s.shape} timed at {s.roofline_fraction:.2f}x the roofline "
                f"({s.time_us:.2f} us measured): faster than the machine allows, so the kernel "
                f"skips work or the measurement is broken; not reported as a result")
    return Status.OK, message
