"""Result sinks: Parquet (the durable source of truth) and MLflow (for browsing and comparing)."""

from .mlflow_runs import LoggedRun, LoggedSearch, read_artifact_text, read_mlflow_run
from .mlflow_sink import MLflowSink
from .mlflow_trials import TrialMLflowSink
from .parquet import SCHEMA, ParquetSink, evaluation_rows, read_evaluations

__all__ = [
    "SCHEMA", "LoggedRun", "LoggedSearch", "MLflowSink", "ParquetSink", "evaluation_rows",
    "TrialMLflowSink", "read_artifact_text", "read_evaluations", "read_mlflow_run",
]
