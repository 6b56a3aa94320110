"""``kernelswarm tune`` as a user meets it: the example kernel with a knob found by name, the
closing table's spread and words, the report it writes (and ``kernelswarm report`` of its
folder), on real Ray, g++, the sandbox, Optuna's journal, Parquet and SQLite MLflow."""

from __future__ import annotations

import io
import json
import math
import os
from contextlib import redirect_stdout
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient

from kernelswarm.experiments.commands.cli import main

EXAMPLE = "silu_and_mul_unroll.cpp"  # in the task's folder, installed with the package


def _settings(folder: Path, cache: Path) -> list[str]:
    pairs = [f'run.out_dir="{folder / "runs"}"', f'evaluator.cache_dir="{cache}"',
             "evaluator.seeds=1", "evaluator.check_heldout=false", "timing.budget_s=0.05",
             # 5 calls a shape at least: a spread needs 4 (fewer: "±?", tested below)
             "timing.min_repeats=5", "timing.max_repeats=10", "timing.flush_cache=false",
             f'tracking.mlflow_uri="sqlite:///{folder / "mlflow.db"}"']
    return [arg for pair in pairs for arg in ("--set", pair)]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, compile_cache, ray_session):
    """(exit code, console text, run folder, summary) of the documented tune command with the
    example kernel, given by name from a folder that has no such file."""
    folder = tmp_path_factory.mktemp("tune-example")
    here = os.getcwd()
    out = io.StringIO()
    os.chdir(folder)
    try:
        with redirect_stdout(out):
            code = main(["tune", "silu_and_mul", "--kernel", EXAMPLE, "--knob", "UNROLL=1,2",
                         "--trials", "2", *_settings(folder, compile_cache)])
    finally:
        os.chdir(here)
    run_dirs = sorted((folder / "runs").glob("tune-*"))
    run_dir = run_dirs[0] if run_dirs else None
    summary = json.loads((run_dir / "summary.json").read_text()) if run_dir else {}
    return code, " ".join(out.getvalue().split()), run_dir, summary, folder


@pytest.mark.slow
def test_the_example_kernel_with_a_knob_is_tuned_by_its_name(tuned):
    code, out, run_dir, summary, _ = tuned
    assert code == 0 and run_dir is not None, out[-3000:]
    tune = json.loads((run_dir / "tune.json").read_text())
    assert Path(tune["kernel_file"]).name == EXAMPLE
    assert tune["knob_space"] == {"UNROLL": [1, 2]}
    assert sorted(t["knobs"]["UNROLL"] for t in summary["top_trials"]) == [1, 2]


@pytest.mark.slow
def test_the_closing_table_gives_each_trials_spread_in_the_words_of_run(tuned):
    code, out, _, summary, _ = tuned
    assert code == 0, out[-3000:]
    assert "vs eager" in out and "vs PyTorch" not in out
    for trial in summary["top_trials"]:
        ci = trial["speedup_vs_start_ci"]
        assert ci is not None and math.isfinite(ci) and ci > 0
        assert f"{trial['speedup_vs_start']:.3f}x ±{ci:.3f}" in out
    best = summary["best"]
    tied = best["within_noise_of"]
    inside = abs(best["speedup_vs_start"] - 1.0) <= best["speedup_vs_start_ci"]
    # the table's first row is named the best only when it is faster beyond the noise
    said = "no setting is clearly the best" in out or "is inside the noise (≈)" in out
    assert said == bool(tied or inside), out[-2000:]
    if tied:
        assert f"not faster than trial {tied[0]}" in out


@pytest.mark.slow
def test_tune_writes_a_report_that_says_task_device_timing_and_trials(tuned):
    code, out, run_dir, summary, folder = tuned
    assert code == 0, out[-3000:]
    html = run_dir / "report" / "report.html"
    assert f"report: {html}" in out and html.is_file()
    text = (run_dir / "report" / "report.md").read_text()
    assert summary["device"].startswith("cpu")
    assert f"for task silu_and_mul (cpp) on {summary['device']} ·" in text
    assert "timed with a warm cache (not flushed)" in text
    assert "on ?" not in text and "a ?" not in text and "Lineages" not in text
    trials = text[text.index("## Trials"):]
    for trial in summary["top_trials"]:
        assert f"| {trial['trial']} | UNROLL={trial['knobs']['UNROLL']} | OK |" in trials
    # and on the session's MLflow run, beside its trials
    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("tune").experiment_id],
                              filter_string=f"tags.run_id = '{run_dir.name}'")
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert "report/report.html" in [a.path for a in
                                     client.list_artifacts(parent.info.run_id, "report")]
    assert "silu_and_mul" in parent.data.tags["mlflow.note.content"]


@pytest.mark.slow
def test_report_of_a_tune_folder_is_the_tune_report(tuned, capsys):
    code, out, run_dir, summary, _ = tuned
    assert code == 0, out[-3000:]
    page = run_dir / "report" / "report.md"
    written = page.read_text() if page.is_file() else None  # by the tune command
    assert main(["report", str(run_dir)]) == 0
    assert str(run_dir / "report" / "report.html") in capsys.readouterr().out
    text = page.read_text()
    assert "silu_and_mul (cpp) on cpu" in text and "timed with a warm cache" in text
    assert "on ?" not in text and "a ?" not in text and "## Lineages" not in text
    assert all(f"| {t['trial']} | UNROLL=" in text for t in summary["top_trials"])
    assert text == written


def _trial(number: int, unroll: int, speedup: float, ci: float) -> optuna.trial.FrozenTrial:
    trial = optuna.trial.create_trial(
        params={"UNROLL": unroll}, value=speedup,
        distributions={"UNROLL": optuna.distributions.CategoricalDistribution([1, 2, 4, 8])},
        user_attrs={"candidate_id": f"c{number}", "speedup_vs_start_ci": ci,
                    "speedup_vs_eager": speedup * 0.9, "speedup_vs_eager_ci": ci})
    trial.number = number
    return trial


def test_a_best_inside_the_noise_is_not_named_without_saying_so():
    from rich.console import Console

    from kernelswarm.experiments.views.tune_view import TrialFigures, best_table, noise_verdict

    close = [_trial(2, 8, 1.009, 0.030), _trial(0, 1, 0.982, 0.041)]
    console = Console(file=io.StringIO(), width=120)
    console.print(best_table(close, "study"))
    table = console.file.getvalue()
    assert "1.009x ±0.030 ≈" in table and "0.982x ±0.041 ≈" in table and "vs eager" in table
    verdict = noise_verdict([TrialFigures.of(t) for t in close])
    assert verdict.startswith("no setting is clearly the best: trial 2 (UNROLL=8) is not "
                              "faster than trial 0 (UNROLL=1) beyond the timing noise")
    apart = [_trial(2, 8, 1.500, 0.030), _trial(0, 1, 0.982, 0.041)]
    assert noise_verdict([TrialFigures.of(t) for t in apart]) == ""
    unknown = [_trial(2, 8, 1.500, None), _trial(0, 1, 0.982, 0.041)]
    console.print(best_table(unknown, "study"))
    assert "1.500x ±?" in console.file.getvalue()
    assert noise_verdict([TrialFigures.of(t) for t in unknown]).startswith(
        "the spread of trial 2 (UNROLL=8) is unknown")


def test_a_kernel_name_not_in_the_task_folder_lists_the_files_there(tmp_path, capsys):
    code = main(["tune", "silu_and_mul", "--kernel", "no_such.cpp", "--knob", "UNROLL=1,2",
                 "--trials", "1", *_settings(tmp_path, tmp_path)])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 2 and "'no_such.cpp' is not a file" in out and EXAMPLE in out
    assert not (tmp_path / "runs").exists()
