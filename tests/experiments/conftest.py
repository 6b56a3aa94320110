"""A small real CPU run shared by the report, console and MLflow layout tests."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console


@pytest.fixture(scope="session")
def small_run(tmp_path_factory: pytest.TempPathFactory, compile_cache: Path, ray_session):
    """(outcome, console text, MLflow URI) of a two-lineage silu_and_mul search through real Ray,
    g++, the sandbox, Parquet and SQLite MLflow, printed to an 80-column plain (non-tty) log.
    It searches with MAP-Elites and novelty rejection on (the other runs of the suite use the
    default islands), so the configuration's strategy keys are exercised end to end."""
    from kernelswarm.experiments.config import load_config
    from kernelswarm.experiments.run.execute import run

    folder = tmp_path_factory.mktemp("small-run")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    config = load_config(None, [
        f'run.out_dir="{folder / "runs"}"', "run.name=small",
        "search.lineages=2", "search.candidates_per_lineage=3", "search.wall_time_s=600",
        'search.strategy="map_elites"', "search.novelty=0.95",
        f'tracking.mlflow_uri="{uri}"', f'evaluator.cache_dir="{compile_cache}"',
        "timing.budget_s=0.05", "timing.min_repeats=5", "timing.max_repeats=30"])
    console = Console(file=io.StringIO(), width=80)  # a file: not a terminal, like a CI log
    outcome = run(config, console)
    return outcome, console.file.getvalue(), uri
