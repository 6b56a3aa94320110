"""Result sinks: Parquet (the durable source of truth) and MLflow (for browsing and comparing).

Each name is imported from its module on first use: a process that needs one module of this
package (a lineage actor reads ``llm_trace``'s folder name) does not load pyarrow with Parquet's.
"""

from __future__ import annotations

import importlib
from typing import Any

_MODULES = {
    "LoggedRun": "mlflow_runs", "LoggedSearch": "mlflow_runs",
    "read_artifact_text": "mlflow_runs", "read_mlflow_run": "mlflow_runs",
    "MLflowSink": "mlflow_sink", "TrialMLflowSink": "mlflow_trials",
    "SCHEMA": "parquet", "ParquetSink": "parquet", "evaluation_rows": "parquet",
    "read_evaluations": "parquet",
}

__all__ = sorted(_MODULES)


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_MODULES[name]}", __name__), name)
