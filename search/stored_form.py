"""An evaluation's stored form: its typed figures (search/measured.py) under the keys of the
``resources`` and ``metrics`` maps they had before they were fields.

``stored_detail`` writes it (the Parquet columns ``resources``/``metrics``, MLflow's
``resource.*``/``profile.*`` metrics) and ``typed_detail`` reads it back, so the files of runs
written before the fields existed read the same as new ones, and older versions read new files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, fields
from typing import Any

from .evaluation import Evaluation
from .measured import (
    BaselineSource,
    EvaluationCost,
    MachineFigures,
    Profile,
    kernel_resources,
    strings,
)

_MACHINE_KEYS = tuple(f.name for f in fields(MachineFigures))
_COST_KEYS = tuple(f.name for f in fields(EvaluationCost))
# cost fields that records written before them lack: stored only when they hold something, so
# that such a record reads and is written back unchanged
_COST_ADDED_LATER = frozenset({"runner_s", "build_wait_s", "jit_compiles"})
_TYPED_RESOURCES = {"binary", "kernels"}
_TYPED_METRICS = {*_MACHINE_KEYS, *_COST_KEYS, "baselines", "baselines_error",
                  "extra_checks_dropped", "profile", "ncu", "reused_from"}


def stored_detail(evaluation: Evaluation) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(resources, metrics)`` as stored: the free-form maps with each typed field under the
    key it had before it was a field."""
    e = evaluation
    resources = dict(e.resources)
    if e.binary:
        resources["binary"] = e.binary
    if e.kernel_resources:
        resources["kernels"] = {k.kernel: k.as_dict() for k in e.kernel_resources}
    metrics = dict(e.metrics)
    if e.machine is not None:
        metrics.update(e.machine.as_metrics())
    if e.baselines is not None:
        metrics.update({"baselines_error": e.baselines.error} if e.baselines.error
                       else {"baselines": e.baselines.as_dict()})
    if e.dropped_checks:
        metrics["extra_checks_dropped"] = dict(e.dropped_checks)
    if e.profile is not None:
        if e.profile.launches:
            metrics["profile"] = e.profile.stored_launches()
        if e.profile.ncu_shape or e.profile.ncu or e.profile.ncu_error:
            metrics["ncu"] = e.profile.stored_ncu()
    if e.cost is not None:
        metrics.update({k: (dict(v) if isinstance(v, Mapping) else v)
                        for k, v in asdict(e.cost).items()
                        if k not in _COST_ADDED_LATER or v})
    if e.reused_from:
        metrics["reused_from"] = e.reused_from
    return resources, metrics


def typed_detail(resources: Mapping[str, Any], metrics: Mapping[str, Any]) -> dict[str, Any]:
    """``Evaluation``'s keyword arguments from the stored ``(resources, metrics)`` of any
    version: the typed fields parsed from their keys, the rest left free-form."""
    return {
        "binary": str(resources.get("binary") or ""),
        "kernel_resources": kernel_resources(resources.get("kernels")),
        "machine": MachineFigures.parse(metrics),
        "baselines": BaselineSource.parse(metrics.get("baselines"), metrics.get("baselines_error")),
        "dropped_checks": strings(metrics.get("extra_checks_dropped")),
        "profile": Profile.parse(metrics.get("profile"), metrics.get("ncu")),
        "cost": EvaluationCost.parse(metrics) if any(k in metrics for k in _COST_KEYS) else None,
        "reused_from": str(metrics.get("reused_from") or ""),
        "resources": {k: v for k, v in resources.items()
                      if k not in _TYPED_RESOURCES},
        "metrics": {k: v for k, v in metrics.items()
                    if k not in _TYPED_METRICS},
    }
