"""A run whose starting kernel does not compile stops with the compiler's message whole and
naming the user's file, keeps its folder with a summary.json saying why and no best kernel, and
its MLflow runs say FAILED and why."""

from __future__ import annotations

import json

import pytest
from mlflow.tracking import MlflowClient

from kernelswarm.experiments.authoring.task_folders import scaffold_task
from kernelswarm.experiments.commands.cli import main

pytestmark = pytest.mark.slow

BROKEN = "out[i] = alpha * x[i] + y[i] + undefined_z[i];"


def test_a_starting_kernel_that_does_not_compile_leaves_a_failed_run_saying_why(
        tmp_path, capsys, monkeypatch, compile_cache, ray_session):
    monkeypatch.setenv("COLUMNS", "240")  # the source line on one line
    folder = scaffold_task("my_op", tmp_path)
    kernel = folder / "my_op.cpp"
    kernel.write_text(kernel.read_text().replace("out[i] = alpha * x[i] + y[i];", BROKEN))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    status = main(["run", "--task", str(folder), "--set", f'run.out_dir="{tmp_path / "runs"}"',
                   "--set", f'tracking.mlflow_uri="{uri}"',
                   "--set", f'evaluator.cache_dir="{compile_cache}"'])
    out = capsys.readouterr().out
    assert status == 1
    assert "COMPILE_ERROR" in out and f"{kernel}:5:" in out
    assert BROKEN.rstrip(";") in out  # console markup would have eaten every "[i]"
    (run_dir,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "COMPILE_ERROR" in summary["stop_reason"] and f"{kernel}:5:" in summary["stop_reason"]
    assert summary["best"] is None and not (run_dir / "best").exists()
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("my_op").experiment_id])
    assert runs and {r.info.status for r in runs} == {"FAILED"}
    parent = next(r for r in runs if "lineage" not in r.data.tags)
    assert "COMPILE_ERROR" in parent.data.tags["failure"]
    assert "undefined_z" in parent.data.tags["failure"]
