"""A task whose own starting kernel crashes, hangs or is wrong: ``tasks check --evaluate``,
``eval`` and ``run`` give it the verdict a candidate would get, within the run's limit
(``run_timeout_s``, from the start's first call on), exit 1 and show no traceback; a run
keeps its folder with a summary.json saying why, and its MLflow runs are FAILED."""

from __future__ import annotations

import json
import time

import pytest
from mlflow.tracking import MlflowClient

from kernelswarm.evaluators import SandboxEvaluator
from kernelswarm.evaluators.judge.deadlines import Deadline
from kernelswarm.experiments.authoring.task_folders import scaffold_task
from kernelswarm.experiments.commands.cli import main

pytestmark = pytest.mark.slow

LOOP = "for (int64_t i = 0; i < n; ++i) out[i] = alpha * x[i] + y[i];"
# fault -> (the starting kernel's loop replaced by, the status, words the verdict must have)
FAULTS = {
    "crash": ("volatile float* nowhere = 0; *nowhere = 1.0f; " + LOOP, "RUNTIME_ERROR",
              "SIGSEGV (segmentation fault)"),
    "hang": ("for (volatile int spin = 0; spin >= 0; spin = (spin + 1) % 1000) {} " + LOOP,
             "TIMEOUT", "exceeded its limit of"),
    "wrong": ("for (int64_t i = 0; i < n; ++i) out[i] = alpha * x[i] - y[i];", "INCORRECT",
              "wrong result on shape"),
}
STARTUP_S = 60.0  # the runner's start-up limit in these tests (120 s and more by default)
RUN_S = 8.0  # the run's limit (run_timeout_s), which holds from the start's warm-up calls on


@pytest.fixture
def broken_start(tmp_path, monkeypatch, compile_cache):
    """``broken_start(fault)``: a scaffolded task whose cpp starting kernel has ``fault``, and a
    correct kernel file beside it."""
    monkeypatch.setenv("KERNELSWARM_CACHE", str(compile_cache))
    monkeypatch.setenv("COLUMNS", "240")
    monkeypatch.setattr(SandboxEvaluator, "startup_s", lambda self: STARTUP_S)
    monkeypatch.setattr(SandboxEvaluator, "run_deadline",
                        lambda self: Deadline("run_timeout_s", RUN_S, 0.0, 1.0))

    def make(fault: str):
        folder = scaffold_task("my_op", tmp_path)
        kernel = folder / "my_op.cpp"
        good = tmp_path / "mine.cpp"
        good.write_text(kernel.read_text())
        kernel.write_text(kernel.read_text().replace(LOOP, FAULTS[fault][0]))
        return folder, good

    return make


def _no_traceback(out: str) -> None:
    assert "Traceback" not in out and "RayTaskError" not in out and "SandboxError" not in out


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_tasks_check_gives_a_misbehaving_start_its_verdict_and_says_no_ok(broken_start, capsys,
                                                                          fault):
    folder, _ = broken_start(fault)
    began = time.monotonic()
    assert main(["tasks", "check", str(folder), "--evaluate"]) == 1
    assert time.monotonic() - began < RUN_S + 60
    out = capsys.readouterr().out
    _, status, words = FAULTS[fault]
    verdict = next(line for line in out.splitlines() if line.startswith("starting cpp kernel:"))
    assert f"starting cpp kernel: {status} " in verdict and words in " ".join(out.split())
    assert "ok:" not in out
    _no_traceback(out)


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_eval_against_a_task_whose_start_misbehaves_says_so_in_a_line(broken_start, capsys,
                                                                       fault):
    folder, good = broken_start(fault)
    began = time.monotonic()
    assert main(["eval", str(folder), str(good)]) == 1
    assert time.monotonic() - began < RUN_S + 60
    captured = capsys.readouterr()
    out = captured.out + captured.err
    _, status, words = FAULTS[fault]
    first = next(line for line in out.splitlines() if line.strip())
    assert first.startswith("error: the task's starting cpp kernel fails") and status in first
    assert words in " ".join(out.split())
    _no_traceback(out)


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_run_whose_start_misbehaves_keeps_a_folder_saying_why_and_fails_in_mlflow(
        broken_start, tmp_path, capsys, ray_session, compile_cache, fault):
    folder, _ = broken_start(fault)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    status = main(["run", "--task", str(folder), "--set", f'run.out_dir="{tmp_path / "runs"}"',
                   "--set", f'tracking.mlflow_uri="{uri}"',
                   "--set", f'evaluator.cache_dir="{compile_cache}"',
                   "--set", "evaluator.run_timeout_s=5", "--set", "search.lineages=1"])
    out = capsys.readouterr().out
    _, verdict, words = FAULTS[fault]
    assert status == 1
    _no_traceback(out)
    error = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and verdict in error[0], out
    assert words in " ".join(out.split())
    (run_dir,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert verdict in summary["stop_reason"] and words in summary["stop_reason"]
    assert summary["best"] is None and summary["records"] == 1
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("my_op").experiment_id])
    assert runs and {r.info.status for r in runs} == {"FAILED"}
    parent = next(r for r in runs if "lineage" not in r.data.tags)
    assert verdict in parent.data.tags["failure"]
