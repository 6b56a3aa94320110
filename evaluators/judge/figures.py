"""What the judge knows before any candidate, and what it derives from a candidate's times.

``Calibration`` is measured once per evaluator, in a runner that never loads candidate code:
the machine's figures (bandwidth, flops), the baselines (eager PyTorch per tuning shape, from
``acquire_baselines``), and the starting kernel timed through the candidates' own protocol (the
canary and the null batch's cost, evaluators/judge/timing.py). ``derive_shape_figures`` turns a
shape's times into speedups and the fraction of the roofline; ``roofline_verdict`` refuses a
speedup the machine cannot deliver.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ...search.evaluation import ShapeResult, Status
from ...search.task import Shape
from ..machine import MachineFigures
from .timing import CleanFigures
from .trial import Trial

ROOFLINE_MARGIN = 1.5


@dataclass(frozen=True)
class Baselines:
    """Per tuning shape label, the times (us) a speedup is taken against; NaN: not measured."""

    eager_us: Mapping[str, float] = field(default_factory=dict)
    compile_us: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Calibration:
    machine: MachineFigures
    baselines: Baselines
    clean: Mapping[str, CleanFigures]  # per tuning shape label
    checks: tuple[dict[str, Any], ...]  # the extra checks the starting kernel passes
    dropped_checks: Mapping[str, str]  # label -> why
    flush_bytes: int


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


def acquire_baselines(calibration_trial: Trial, tuning: tuple[Shape, ...]
                      ) -> tuple[MachineFigures, Baselines]:
    """BASELINES CALL POINT: the machine and the baselines every speedup is taken against.

    Today: eager PyTorch, timed by the calibration runner before it ever holds candidate code
    (a runner serving a candidate never times a baseline); ``torch.compile`` is not measured
    (NaN). One call per evaluator.
    """
    reply = calibration_trial.ask({"type": "calibrate"}, "calibrated")
    machine = _machine(reply.get("machine"))
    raw = reply.get("eager_us")
    eager = {s.label: float(raw.get(s.label, math.nan)) if isinstance(raw, dict) else math.nan
             for s in tuning}
    return machine, Baselines(eager_us=eager,
                              compile_us={s.label: math.nan for s in tuning})


def derive_shape_figures(result: ShapeResult, shape: Shape, roofline: tuple[float, float],
                         machine: MachineFigures, baselines: Baselines) -> ShapeResult:
    """Speedups over the starting kernel and the baselines, and the fraction of the roofline,
    for a timed ``result`` of ``shape`` (``roofline``: the task's bytes and flops)."""
    eager = float(baselines.eager_us.get(shape.label, math.nan))
    compiled = float(baselines.compile_us.get(shape.label, math.nan))
    ideal_us = machine.ideal_seconds(*roofline) * 1e6
    return replace(result, eager_time_us=eager,
                   speedup_vs_start=result.start_time_us / result.time_us,
                   speedup_vs_eager=eager / result.time_us,
                   speedup_vs_compile=compiled / result.time_us,
                   roofline_fraction=ideal_us / result.time_us)


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
