"""What summary.json says that the MLflow sink cannot know when it closes, logged to the parent
run once summary.json is written: the run's whole wall time, its start-up's, and whether its best
was confirmed.

The sink closes inside the tracker, before the driver has stopped its clock, and logs the
tracker's own wall time as ``search_wall_s`` (summary.json's name for it); the run's ``wall_s``,
from the command's start (Ray, the actors and the starting kernel included), is logged here, so
that a metric and a summary key of the same name hold the same figure.
"""

from __future__ import annotations

import math
import time
from typing import Any

CONFIRMED_TAG = "best_confirmed"  # "true": the best's figures are the median of its repeats


def summary_figures(summary: dict[str, Any]) -> tuple[dict[str, float], dict[str, str]]:
    """(metrics, tags) of the parent run from summary.json."""
    metrics = {}
    for name in ("wall_s", "startup_s"):
        value = summary.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) \
                and math.isfinite(value):
            metrics[name] = float(value)
    tags = {}
    best = summary.get("best")
    if best:
        confirmed = bool(best.get("confirmed"))
        tags[CONFIRMED_TAG] = "true" if confirmed else "false"
        if not confirmed:  # why, in the UI beside the figure it qualifies
            tags["best_unconfirmed_reason"] = str(best.get("unconfirmed_reason") or "not run")
    return metrics, tags


def log_summary_figures(client: Any, run_id: str, summary: dict[str, Any]) -> None:
    """Log ``summary_figures`` to ``run_id`` with ``client`` (an MlflowClient)."""
    from mlflow.entities import Metric, RunTag

    metrics, tags = summary_figures(summary)
    millis = int(time.time() * 1000)
    client.log_batch(run_id, metrics=[Metric(k, v, millis, 0) for k, v in metrics.items()],
                     tags=[RunTag(k, v) for k, v in tags.items()])
