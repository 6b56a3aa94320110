"""Speedups as every report states them: over the best baseline (named), with the half-width
of their 95% confidence interval, and ``≈`` where the interval holds 1 (within the noise).

Used by the closing table (views/progress.py), summary.json (run/execute.py) and ``kernelswarm eval``.
"""

from __future__ import annotations

import math
from typing import Any

from kernelswarm.search import Evaluation


def speedup_text(value: float, ci: float = math.nan, mark_noise: bool = False) -> str:
    """``1.234x ±0.012``; with ``mark_noise``, ``≈`` after a speedup whose 95% interval holds
    1.0 (no faster or slower than the baseline within the timing noise). ``-`` when unknown."""
    if not (value > 0):
        return "-"
    text = f"{value:.3f}x"
    if math.isfinite(ci):
        text += f" ±{ci:.3f}"
        if mark_noise and abs(value - 1.0) <= ci:
            text += " ≈"
    return text


def time_text(median_us: float, spread_us: float = math.nan) -> str:
    """``12.34 ±0.56`` (µs, the median and its interquartile range); the spread left out where
    it is unknown (fewer than 4 timed calls), never ``±nan``; ``-`` when not timed."""
    if not (median_us > 0):
        return "-"
    return f"{median_us:.2f}" + (f" ±{spread_us:.2f}" if math.isfinite(spread_us) else "")


def best_text(evaluation: Evaluation) -> str:
    text = speedup_text(evaluation.speedup_vs_best, evaluation.geomean_ci("speedup_vs_best"),
                        mark_noise=True)
    names = sorted({s.best_baseline for s in evaluation.shapes if s.best_baseline})
    return f"{text} ({'/'.join(names)})" if names and text != "-" else text


def baseline_label(names: set[str]) -> str:
    """What a "vs best baseline" figure is over, as a heading says it: "vs eager" when eager
    was the only baseline measured (on a CPU torch.compile is skipped unless asked for), so
    that a figure over eager is never read as one over the best PyTorch has."""
    return "vs eager" if names == {"eager"} else "vs best baseline"


def baseline_names(*evaluations: Evaluation | None) -> set[str]:
    """The baselines that were the best on some shape of ``evaluations``."""
    return {s.best_baseline for e in evaluations if e is not None for s in e.shapes
            if s.best_baseline}


def finite(value: Any) -> Any:
    """``value`` with NaN and infinities as None, recursively (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def shape_figures(evaluation: Evaluation) -> list[dict[str, Any]]:
    """Per shape: the kernel's time, the best baseline (named) and every speedup with its 95%
    confidence half-width; ``within_noise`` when the interval over the best baseline holds 1."""
    return [{"shape": s.shape, "time_us": s.time_us, "time_spread_us": s.time_spread_us,
             "samples": s.samples, "best_baseline": s.best_baseline,
             "best_baseline_us": s.best_baseline_us,
             "best_baseline_spread_us": s.best_baseline_spread_us,
             "speedup_vs_best": s.speedup_vs_best, "speedup_vs_best_ci": s.speedup_vs_best_ci,
             "within_noise": bool(abs(s.speedup_vs_best - 1.0) <= s.speedup_vs_best_ci),
             "speedup_vs_start": s.speedup_vs_start, "speedup_vs_start_ci": s.speedup_vs_start_ci,
             "eager_time_us": s.eager_time_us, "speedup_vs_eager": s.speedup_vs_eager,
             "speedup_vs_eager_ci": s.speedup_vs_eager_ci, "compile_time_us": s.compile_time_us,
             "speedup_vs_compile": s.speedup_vs_compile,
             "speedup_vs_compile_ci": s.speedup_vs_compile_ci,
             "roofline_fraction": s.roofline_fraction} for s in evaluation.shapes]


def measured(value: float) -> float:
    """A geometric mean as a document states it: NaN (null in JSON) where ``Evaluation`` gives
    0.0 for "not measured on every shape" (torch.compile on the CPU, say), never a 0x."""
    return value if value > 0 else math.nan


def kernel_figures(evaluation: Evaluation) -> dict[str, Any]:
    """The geometric means over shapes (with their 95% half-widths; null where a baseline was
    not measured) and the per-shape figures."""
    return {"speedup_vs_start": measured(evaluation.speedup),
            "speedup_vs_start_ci": evaluation.geomean_ci("speedup_vs_start"),
            "speedup_vs_best": measured(evaluation.speedup_vs_best),
            "speedup_vs_best_ci": evaluation.geomean_ci("speedup_vs_best"),
            "speedup_vs_eager": measured(evaluation.speedup_vs_eager),
            "speedup_vs_compile": measured(evaluation.speedup_vs_compile),
            "shapes": shape_figures(evaluation)}


def compact_labels(labels: list[str]) -> tuple[dict[str, str], str]:
    """Each shape label without the ``key=value`` parts all shapes share, and those parts."""
    parts = {label: label.split(",") for label in labels}
    shared = set.intersection(*(set(p) for p in parts.values())) if len(labels) > 1 else set()
    compact = {label: ",".join(p for p in items if p not in shared) or label
               for label, items in parts.items()}
    common = ",".join(p for p in parts[labels[0]] if p in shared) if labels else ""
    return compact, common
