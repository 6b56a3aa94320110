"""How busy a pool's evaluation workers were, read from what its dispatcher kept.

``EvalDispatcher.activity()`` (eval_worker.py) lists every evaluation and preparation a worker
did (worker, cell, kind, Unix times, outcome, calibration) and where each worker runs (its
process, node and GPU). ``summarise`` turns that into what a person asks of a pool: how busy the
workers were overall and minute by minute, how many evaluations a minute they judged, how often
an evaluator calibrated afresh or read its calibration, and whether two workers shared a GPU.
``write_activity`` keeps both beside a sweep's or a study's results (``workers.json``).

A worker is busy while it holds an evaluation or a preparation; the figures cover the window
asked for (by default from the pool's start to its last interval), each interval clipped to it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ACTIVITY_FILE = "workers.json"
MINUTE_S = 60.0
MEASURED, READ = "measured", "read from the cache"


def _overlap(interval: Mapping[str, Any], start: float, end: float) -> float:
    return max(0.0, min(float(interval["ended"]), end) - max(float(interval["began"]), start))


def busy_by_minute(intervals: Sequence[Mapping[str, Any]], workers: int, since: float,
                   until: float, minute_s: float = MINUTE_S) -> list[float]:
    """The workers' busy share in each minute from ``since`` to ``until`` (the last one over
    what is left of it, when at least a tenth of a minute is left)."""
    shares = []
    start = since
    while start < until:
        end = min(start + minute_s, until)
        if end - start < minute_s / 10 and shares:
            break
        held = sum(_overlap(i, start, end) for i in intervals)
        shares.append(held / (workers * (end - start)))
        start = end
    return shares


def shared_gpus(placements: Sequence[Mapping[str, Any]]) -> list[str]:
    """The GPUs (by UUID) that more than one worker runs on: none, when each worker has its own."""
    seen = Counter(str(p.get("gpu_uuid", "")) for p in placements
                   if p.get("gpu_uuid") and not str(p["gpu_uuid"]).startswith("unknown"))
    return sorted(uuid for uuid, n in seen.items() if n > 1)


def summarise_activity(activity: Mapping[str, Any], since: float | None = None,
                       until: float | None = None) -> dict[str, Any]:
    """Busy fractions (overall and by minute), evaluations and their rate, preparations,
    calibrations measured and read, the workers' GPUs and worker deaths, over ``since`` to
    ``until`` (Unix times; default: the pool's start to its last interval's end)."""
    intervals = list(activity.get("intervals", ()))
    placements = list(activity.get("workers", ()))
    workers = max(len(placements), 1)
    since = float(activity.get("started", 0.0)) if since is None else since
    if until is None:
        until = max((float(i["ended"]) for i in intervals), default=since)
    span = max(until - since, 1e-9)
    inside = [i for i in intervals if _overlap(i, since, until) > 0]
    evaluated = [i for i in inside if i["kind"] == "evaluate" and since <= i["ended"] <= until]
    calibrations = Counter(i.get("calibration", "") for i in inside)
    gpus = sorted({str(p["gpu_uuid"]) for p in placements
                   if p.get("gpu_uuid") and not str(p["gpu_uuid"]).startswith("unknown")})
    return {
        "workers": len(placements), "gpus": gpus, "shared_gpus": shared_gpus(placements),
        "window_s": round(span, 3),
        "busy": sum(_overlap(i, since, until) for i in inside) / (workers * span),
        "busy_by_minute": busy_by_minute(inside, workers, since, until),
        "evaluations": len(evaluated),
        "evaluations_per_minute": len(evaluated) / span * MINUTE_S,
        "preparations": sum(1 for i in inside if i["kind"] == "prepare"),
        "calibrations": {"measured": calibrations.get(MEASURED, 0),
                         "read": calibrations.get(READ, 0)},
        "worker_deaths": int(activity.get("worker_deaths", 0)),
    }


def write_activity(folder: Path, activity: Mapping[str, Any], since: float | None = None,
                   until: float | None = None) -> dict[str, Any]:
    """``folder/workers.json``: the activity and its summary; returns the summary."""
    summary = summarise_activity(activity, since, until)
    doc = {"summary": summary, **activity}
    path = folder / ACTIVITY_FILE
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(doc, indent=1, default=str))
    temporary.replace(path)
    return summary


def activity_line(summary: Mapping[str, Any]) -> str:
    """One line for the console, e.g. "evaluation workers: 4 on 4 GPUs, busy 93% (by minute
    91% 95% 94%), 212 evaluations (52.1 a minute); calibrations: 0 measured, 24 read"."""
    gpus = len(summary.get("gpus", ()))
    where = f" on {gpus} GPU{'s' if gpus != 1 else ''}" if gpus else ""
    minutes = " ".join(f"{share:.0%}" for share in summary["busy_by_minute"][:12])
    more = " …" if len(summary["busy_by_minute"]) > 12 else ""
    calibrations = summary["calibrations"]
    line = (f"evaluation workers: {summary['workers']}{where}, busy {summary['busy']:.0%} "
            f"(by minute {minutes}{more}), {summary['evaluations']} evaluations "
            f"({summary['evaluations_per_minute']:.1f} a minute); calibrations: "
            f"{calibrations['measured']} measured, {calibrations['read']} read")
    if summary["shared_gpus"]:
        line += f"; SHARED GPUs: {', '.join(summary['shared_gpus'])}"
    if summary["worker_deaths"]:
        line += f"; worker deaths: {summary['worker_deaths']}"
    return line
