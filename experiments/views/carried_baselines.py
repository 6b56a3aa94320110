"""Baseline times as measured, and as every table shows them: carried over.

The baselines (eager, compile, library kernels) are timed once per task, machine and timing
settings, with the starting kernel beside them, and cached (evaluators/baselines/baselines.py). Each
evaluation times its candidate interleaved with the starting kernel, and the baselines' times
it reports are the cached ones times the starting kernel's ratio, now over then: on a machine
busier than at the measurement every baseline time grows with the kernel's. So one shape's
eager time reads 31.78 µs in one run and 18.42 in another, from one cached 12.68 µs. Tables
that show a baseline's time say so, with the factor and the measured time (this module);
the speedups are unchanged by it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelswarm.evaluators import default_cache_dir
from kernelswarm.search import Evaluation


@dataclass(frozen=True)
class MeasuredBaselines:
    """One cache entry of the baselines: per shape, each baseline's median time (µs) as
    measured, and the starting kernel's, timed beside them."""

    path: Path
    times_us: Mapping[str, Mapping[str, float]]  # shape -> baseline name -> µs
    start_us: Mapping[str, float]  # shape -> the starting kernel's µs at the measurement

    def scale(self, shape: str, start_now_us: float) -> float:
        """The factor a shape's baseline times were carried over by: the starting kernel's
        time now over its time at the measurement; 1.0 where either is unknown (then nothing
        was carried, as evaluators/baselines/baselines.py's with_baselines does)."""
        then = self.start_us.get(shape, math.nan)
        if then > 0 and start_now_us > 0:
            return start_now_us / then
        return 1.0

    def document(self) -> dict[str, Any]:
        """summary.json's account of the measurement, beside the carried figures."""
        return {"file": str(self.path),
                "measured_us": {shape: {**times, "start": self.start_us.get(shape)}
                                for shape, times in self.times_us.items()},
                "carried_over": "each evaluation's baseline times are these times x its "
                                "starting kernel's time now / 'start' here (baseline_scale "
                                "per shape)"}


def _median(timed: Any) -> float | None:
    if not isinstance(timed, Mapping) or timed.get("error"):
        return None
    value = timed.get("median_us")
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def read_measured(cache_dir: str | Path | None, task: str, key: str,
                  language: str = "") -> MeasuredBaselines | None:
    """The cache entry ``key`` of ``task``'s baselines under ``cache_dir`` (default: the
    evaluator's), with ``language``'s starting kernel as timed beside them (the entry keeps one
    per language; "" where it holds one only); None when it is gone or unreadable."""
    if not key or not task:
        return None
    folder = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    path = folder / "baselines" / f"{task}-{key}.json"
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    times: dict[str, dict[str, float]] = {}
    for shape, row in dict(doc.get("shapes") or {}).items():
        for name, timed in dict(row).items():
            if (us := _median(timed)) is not None:
                times.setdefault(shape, {})[name] = us
    starts = dict(doc.get("starts") or {})
    if language in starts:
        kept = starts[language]
    elif not language and len(starts) == 1:
        kept = next(iter(starts.values()))
    else:
        kept = doc.get("start") or {}  # an entry of one language, written before "starts"
    start = {shape: us for shape, timed in dict(kept).items()
             if (us := _median(timed)) is not None}
    return MeasuredBaselines(path, times, start)


def measured_of_run(config: Mapping[str, Any], baselines: Mapping[str, Any] | None,
                    language: str = "") -> MeasuredBaselines | None:
    """The measurement a run's baselines came from: its config.json (the cache folder, the
    task) and summary.json's ``baselines`` (the cache key), with the starting kernel of
    ``language`` (the kernel whose figures are carried: default, the task's language)."""
    key = (baselines or {}).get("key") or ""
    task = Path(str((config.get("task") or {}).get("name") or "")).name
    language = language or str((config.get("task") or {}).get("language") or "")
    return read_measured((config.get("evaluator") or {}).get("cache_dir"), task, key, language)


def baseline_scales(evaluation: Evaluation, measured: MeasuredBaselines) -> dict[str, float]:
    """Per shape of ``evaluation``, the factor its baseline times were carried over by."""
    return {s.shape: measured.scale(s.shape, s.start_time_us) for s in evaluation.shapes}


def carried_line(evaluation: Evaluation, measured: MeasuredBaselines | None) -> str:
    """One line under a table of baseline times or speedups over them: the factors, and
    eager's time as measured; "" without a measurement to point to."""
    if measured is None or not evaluation.shapes:
        return ""
    scales = baseline_scales(evaluation, measured)
    factors = ", ".join(f"x{scales[s.shape]:.2f}" for s in evaluation.shapes)
    eager = [measured.times_us.get(s.shape, {}).get("eager") for s in evaluation.shapes]
    text = (f"baseline times are carried over from their measurement by the starting "
            f"kernel's time now / then: {factors} per shape")
    if all(e is not None for e in eager):
        text += f" (eager as measured: {', '.join(f'{e:.2f}' for e in eager)} µs)"
    return text
