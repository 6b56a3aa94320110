"""A quickstart-sized run, then ``kernelswarm eval`` of its best file: the same kernel, the same
settings, the same speedup (within 5%, or within the two measured spreads on a loaded CPU). The
run reports its best kernel as judged again after the search, so the comparison holds whatever
luck the search had."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest
from rich.console import Console

from kernelswarm.experiments.config import load_config
from kernelswarm.experiments.run.execute import run

pytestmark = pytest.mark.slow


def _eval(args: list[str], cache, cwd) -> dict:
    env = {**os.environ, "KERNELSWARM_CACHE": str(cache)}
    done = subprocess.run([sys.executable, "-m", "kernelswarm.experiments.commands.cli", "eval",
                           *args, "--json"], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_eval_of_a_runs_best_file_reproduces_its_speedup(tmp_path, compile_cache, ray_session):
    # The quickstart's own settings (its timing, its regime), fewer candidates.
    config = load_config(None, [
        f'run.out_dir="{tmp_path / "runs"}"', "run.name=agree", "search.lineages=2",
        "search.candidates_per_lineage=4", "tracking.mlflow=false",
        f'evaluator.cache_dir="{compile_cache}"'])
    outcome = run(config, Console(file=io.StringIO(), width=160))
    summary = json.loads((outcome.run_dir / "summary.json").read_text())
    recorded = summary["best"]
    assert recorded["speedup_vs_start"] > 1.0
    # The figure reported is the median of the best kernels judged again after the search (the
    # search's own fastest measurement is a lucky one), with the repeats' spread around it.
    assert recorded["confirmed"] and recorded["repeats"] == 3
    low, high = recorded["speedup_vs_start_range"]
    assert low <= recorded["speedup_vs_start"] <= high
    assert recorded["found_speedup_vs_start"] > 1.0
    chosen = summary["confirmation"]["chosen"]
    assert chosen == recorded["candidate_id"] and len(summary["confirmation"]["kernels"]) == 2
    timing = json.loads((outcome.run_dir / "timing.json").read_text())
    assert timing == {k: v for k, v in summary["timing"].items() if k != "regime"}
    assert timing["flush_cache"] is False  # the quickstart's regime, stated in the table

    # eval of the file and of the run folder, each the median of the run's 3 repeats in fresh
    # sandboxes (as the run took its own figure). They agree with the run's figure within 5%,
    # or, on a machine whose load moves every measurement more than that (a CI run: eval's
    # repeats 3.22x to 4.02x), the two measured ranges overlap within 5%. A search that
    # reported one lucky measurement (3.96x, where eval read 2.86x to 3.16x) fails either way.
    # A load that shifts between the run and eval (a CI machine running other tests: the run's
    # repeats 3.18x to 3.38x, eval's 2.86x to 2.95x) moves one measurement, not the next: an
    # eval that disagrees is judged once more, and a lucky search still fails both times.
    def disagreements(doc: dict) -> list[tuple]:
        found = []
        for figure in ("speedup_vs_start", "speedup_vs_best"):
            low, high = recorded[f"{figure}_range"]
            repeats = doc["repeats"][figure]
            assert len(repeats) == 3
            agrees = doc[figure] == pytest.approx(recorded[figure], rel=0.05)
            overlap = min(repeats) <= high * 1.05 and low <= max(repeats) * 1.05
            if not (agrees or overlap):
                found.append((figure, doc[figure], recorded[figure], (low, high), repeats))
        return found

    docs = []
    for args in ([str(outcome.best_path)], ["--run", str(outcome.run_dir)]):
        doc = _eval(args, compile_cache, tmp_path)
        if disagreements(doc):
            doc = _eval(args, compile_cache, tmp_path)
        assert not disagreements(doc), disagreements(doc)
        docs.append(doc)
    # eval checks the run's files with the run's own extra checks (the tester's)
    checks = json.loads((outcome.run_dir / "checks.json").read_text())
    passed = len(checks) - len(summary["extra_checks_dropped"])
    assert checks and passed > 0
    for doc in docs:
        assert doc["status"] == "OK" and doc["file"] == str(outcome.best_path)
        assert f"and {passed} extra checks" in doc["message"], doc["message"]
        assert {k: v for k, v in doc["timing"].items() if k != "regime"} == timing
        assert doc["candidate_id"] == recorded["candidate_id"]  # the very kernel judged
        assert doc["run"]["recorded"]["speedup_vs_start"] == pytest.approx(
            recorded["speedup_vs_start"])
        for shape in doc["shapes"]:
            assert shape["best_baseline"] and shape["speedup_vs_best"] > 0
            assert shape["speedup_vs_best_ci"] is not None and shape["speedup_vs_best_ci"] >= 0
