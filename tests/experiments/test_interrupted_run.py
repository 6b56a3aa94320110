"""Ctrl-C in the middle of a search, as a user presses it: the command exits 130, and the figures
it kept are labelled unconfirmed wherever they are shown (the console, summary.json, the report,
MLflow), with the command that goes on and confirms them."""

from __future__ import annotations

import _thread
import json
import re
import threading
import time
from pathlib import Path

import pytest

from kernelswarm.experiments.commands.cli import main
from kernelswarm.experiments.sinks import read_evaluations, read_mlflow_run
from kernelswarm.experiments.sinks.mlflow_runs import find_parent_run

pytestmark = pytest.mark.slow


def _press_ctrl_c_once_a_kernel_beats_the_start(runs: Path, stop: threading.Event,
                                                 limit_s: float = 240.0) -> None:
    """SIGINT's KeyboardInterrupt in the main thread once the run has recorded a candidate
    faster than its starting kernel (so that its best is no start), or after ``limit_s``."""
    began = time.monotonic()
    while not stop.wait(0.1):
        folders = list(runs.glob("*/evaluations"))
        try:
            rows = read_evaluations(folders[0].parent).to_pylist() if folders else []
        except (OSError, ValueError):
            rows = []  # a dataset being written: read it again
        faster = any(r["lineage"] >= 0 and (r["candidate_speedup"] or 0) > 1.0 for r in rows)
        if faster or time.monotonic() - began > limit_s:
            _thread.interrupt_main()
            return


def test_ctrl_c_exits_130_and_every_figure_it_kept_says_unconfirmed(
        tmp_path, compile_cache, ray_session, capsys):
    runs, uri = tmp_path / "runs", f"sqlite:///{tmp_path / 'mlflow.db'}"
    stop = threading.Event()
    watcher = threading.Thread(target=_press_ctrl_c_once_a_kernel_beats_the_start,
                               args=(runs, stop), daemon=True)
    watcher.start()
    try:
        status = main(["run", "--set", f'run.out_dir="{runs}"', "--set", "run.name=stopped",
                       # four lineages: each tries its rewrites in its own order, and the search outlasts
                       # the first one to beat the start (two ran out of rewrites 1 s after it)
                       "--set", "search.lineages=4", "--set", "search.candidates_per_lineage=40",
                       "--set", "search.wall_time_s=900", "--set", f'tracking.mlflow_uri="{uri}"',
                       "--set", f'evaluator.cache_dir="{compile_cache}"',
                       "--set", "timing.budget_s=0.05", "--set", "timing.min_repeats=5",
                       "--set", "timing.max_repeats=30",
                       # a cold cache: the start is far from the memory roofline, so that the
                       # planner never stops for it before Ctrl-C (a loaded machine's low
                       # copy bandwidth put the warm start at 105% of it once)
                       "--set", "timing.flush_cache=true"])
    finally:
        stop.set()
    out = capsys.readouterr().out
    assert status == 130, out
    [run_dir] = runs.iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "interrupted by the user"
    best = summary["best"]
    assert best is not None and best["lineage"] >= 0, "the watcher pressed Ctrl-C too early"

    # the console: the best's row and the line under the tables, then how to confirm
    text = " ".join(out.split())
    assert "interrupted: stopping lineages" in text
    row = next(line for line in out.splitlines() if best["candidate_id"] in line
               and "unconfirmed" in line)
    assert f"{best['speedup_vs_start']:.3f}x" in row
    assert not re.search(r"│ confirmed ", out)  # no row claims a confirmation never made
    assert ("unconfirmed: the best kernel was not judged again after the search (interrupted "
            "by the user during the search)") in text
    assert out.rstrip().splitlines()[-1].startswith("interrupted: the figures above are "
                                                    "unconfirmed")
    assert f"kernelswarm run --resume {run_dir}" in text

    # summary.json says why its figures are the search's own
    assert best["confirmed"] is False
    assert best["unconfirmed_reason"] == "interrupted by the user during the search"
    assert summary["confirmation"]["skipped"] == "interrupted by the user during the search"

    # the report: the best kernel's row and the line under it
    markdown = (run_dir / "report" / "report.md").read_text()
    assert "unconfirmed (the search's own)" in markdown
    assert "Unconfirmed: not judged again after the search (interrupted by the user" in markdown

    # MLflow: the parent run's tags beside its best_speedup
    parent = read_mlflow_run(uri, find_parent_run(uri, "stopped", run_dir.name)[0]).parent
    assert parent.tags["best_confirmed"] == "false"
    assert parent.tags["best_unconfirmed_reason"] == "interrupted by the user during the search"
    assert parent.metrics["best_speedup"][-1][1] == pytest.approx(best["speedup_vs_start"])


def test_ctrl_c_in_a_command_that_does_not_stop_itself_exits_130_without_a_traceback(
        compile_cache, monkeypatch, capsys):
    from kernelswarm.evaluators import SandboxEvaluator
    from tests.conftest import SILU_TASK

    monkeypatch.setenv("KERNELSWARM_CACHE", str(compile_cache))
    evaluate = SandboxEvaluator.evaluate

    def pressed_during_the_evaluation(self, candidate):
        _thread.interrupt_main()  # SIGINT's KeyboardInterrupt, in the main thread, from here on
        return evaluate(self, candidate)

    monkeypatch.setattr(SandboxEvaluator, "evaluate", pressed_during_the_evaluation)
    try:
        status = main(["eval", "silu_and_mul", str(SILU_TASK / "silu_and_mul.cpp")])
    except KeyboardInterrupt:
        status = "a KeyboardInterrupt and its traceback"
    captured = capsys.readouterr()
    assert status == 130
    assert captured.out.strip().splitlines()[-1] == "interrupted"
    assert "Traceback" not in captured.out + captured.err
