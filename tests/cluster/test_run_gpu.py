"""A whole `kernelswarm run` on the GPU: Ray with a GPU worker, the cuda kernel of silu_and_mul,
the built-in agent with its CUDA transformations, Parquet. Marked ``gpu``."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from kernelswarm.experiments.config import load_config
from kernelswarm.experiments.run.execute import run
from kernelswarm.experiments.sinks import read_evaluations

pytestmark = pytest.mark.gpu


def test_a_cuda_search_on_a_gpu_worker_finds_a_faster_correct_kernel(tmp_path: Path,
                                                                      compile_cache: Path,
                                                                      ray_session):
    config = load_config(None, [
        f'run.out_dir="{tmp_path / "runs"}"', "run.name=gpu", 'task.language="cuda"',
        'evaluator.device="cuda"', "search.lineages=2", "search.candidates_per_lineage=6",
        "search.wall_time_s=240", "tracking.mlflow=false", f'evaluator.cache_dir="{compile_cache}"',
        "timing.budget_s=0.05", "evaluator.run_timeout_s=300"])
    outcome = run(config, Console(file=io.StringIO(), width=160))
    result = outcome.result
    assert all(not r.error for r in result.lineages), [r.error for r in result.lineages]
    assert result.start is not None and result.start.ok
    assert result.start.device.startswith("cuda")
    best, evaluation = result.summary.best
    assert evaluation.ok and evaluation.speedup > 1.05, evaluation.message
    assert best.origin.role in ("coder", "tuner")
    rows = read_evaluations(outcome.run_dir).to_pylist()
    assert {r["lineage"] for r in rows} == {-1, 0, 1}
    assert any(r["origin_move"].startswith("rewrite:") for r in rows)
    assert all(r["device"].startswith("cuda") for r in rows if r["status"] == "OK")
