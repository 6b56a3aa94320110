"""What a user sees of a run fits 80 columns in a plain log: no cut names or figures, paths
whole on their own line, no Ray or MLflow start-up noise (that goes to run.log)."""

from __future__ import annotations

import dataclasses
import io

import pytest
from rich.console import Console

from kernelswarm.experiments.views.progress import budget_bar, closing_table, progress_table

pytestmark = pytest.mark.slow


def test_a_run_printed_at_80_columns_cuts_nothing_and_keeps_the_noise_in_its_log(small_run):
    outcome, text, _ = small_run
    lines = text.splitlines()
    # the first line says what is running; what the tester added comes under it
    assert lines[0].startswith("kernelswarm silu_and_mul (cpp)"), lines[:3]
    assert lines.index("the tester's extra checks:") > lines.index("run folder (log: run.log):")
    # Only a path (whole, alone on its line) or the MLflow store's URI may run past 80 columns.
    wide = [line for line in lines if len(line) > 80]
    assert all(" " not in line.strip() or "sqlite:///" in line for line in wide), wide
    assert "…" not in text  # rich's ellipsis: a column was cut instead of dropped
    best = outcome.result.summary.best[0]
    assert best.id in text
    for path in (outcome.run_dir, outcome.best_path, outcome.run_dir / "report" / "report.html"):
        assert str(path) in lines  # whole, on a line of its own
    evaluations = lines.index("evaluations (Parquet):")
    assert lines[evaluations + 1] == str(outcome.run_dir / "evaluations")
    assert any(line.startswith("MLflow sqlite:///") for line in lines)
    assert any(line.startswith("Ray ") and "CPUs" in line for line in lines)
    for noise in ("Creating initial MLflow database tables", "INFO worker.py", "(TrackerActor"):
        assert noise not in text
    assert (outcome.run_dir / "run.log").is_file()


def test_the_closing_table_drops_columns_to_fit_and_keeps_them_when_there_is_room(small_run):
    outcome, _, _ = small_run
    for width, wanted in ((80, False), (200, True)):
        console = Console(file=io.StringIO(), width=width)
        console.print(closing_table(outcome.result, "warm cache", width))
        text = console.file.getvalue()
        assert max(len(line) for line in text.splitlines()) <= width
        assert ("stopped" in text) == wanted  # the widest column goes first


def test_the_closing_table_fits_80_columns_when_the_confirmed_kernel_is_a_runner_up(small_run):
    """Confirmation may choose a kernel that is no lineage's best: its row is labelled with the
    lineage that found it ("confirmed (lineage 1)"), and the table still fits, by leaving out
    the candidate column (the best kernel's id is in the per-shape table's title)."""
    outcome, _, _ = small_run
    result = outcome.result
    best = result.summary.best
    assert best is not None and result.confirmation is not None
    if best[0].lineage < 0:
        pytest.skip("this run's best is its starting kernel")
    others = {i: m for i, m in result.summary.lineage_best.items() if m[0].id != best[0].id}
    runner_up = dataclasses.replace(
        result, summary=dataclasses.replace(result.summary, lineage_best=others))
    console = Console(file=io.StringIO(), width=80)
    console.print(closing_table(runner_up, "warm cache", 80))
    text = console.file.getvalue()
    assert f"confirmed (lineage {best[0].lineage})" in text
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80
    assert best[0].id in text


def _live_view(stats: dict, elapsed: float = 10.0) -> str:
    """The live view of ``stats`` ``elapsed`` seconds into a run, as an 80-column terminal
    shows it."""
    console = Console(file=io.StringIO(), width=80)
    console.print(progress_table(stats, elapsed))
    return console.file.getvalue()


def _lineage(steps: int, best: float, move: str, language: str) -> dict:
    return {"steps": steps, "best": best, "last_move": move, "last_status": "OK",
            "language": language}


def test_the_live_view_shows_a_budget_bar_per_lineage():
    assert budget_bar(3, {"candidates": 10, "wall_s": 120}) == "███░░░░░░░ 3/10"
    stats = {"records": 4, "budget": {"candidates": 4},
             "lineages": {0: _lineage(2, 1.5, "tune", "cuda"),
                          1: _lineage(4, 1.1, "unroll", "cuda")}}
    text = _live_view(stats)
    assert "█████░░░░░ 2/4" in text and "██████████ 4/4" in text
    assert "cuda" not in text  # one language: the lineage's number is its label


def test_every_bar_counts_candidates_and_the_wall_time_is_said_once_with_its_unit():
    # 90 s of 120 is nearer its limit than 1 or 6 candidates of 10: still, one unit per bar
    stats = {"records": 8, "budget": {"candidates": 10, "wall_s": 120},
             "lineages": {0: _lineage(1, 1.0, "tune", "cpp"),
                          1: _lineage(6, 1.2, "unroll", "cpp")}}
    text = _live_view(stats, elapsed=90.0)
    assert "█░░░░░░░░░ 1/10" in text and "██████░░░░ 6/10" in text
    assert text.count("/120") == 1 and "wall time 90/120 s" in text.splitlines()[0]
    assert "candidates" in text  # the column says what its bars count


def test_the_live_view_labels_each_lineage_with_its_language_when_a_run_has_several():
    stats = {"records": 3, "budget": {"candidates": 4},
             "lineages": {0: _lineage(2, 1.5, "tune", "cuda"),
                          1: _lineage(1, 1.1, "unroll", "triton")}}
    rows = [line.split() for line in _live_view(stats).splitlines()]
    assert ["0", "cuda"] in [row[:2] for row in rows]
    assert ["1", "triton"] in [row[:2] for row in rows]


def test_a_compile_error_of_the_starting_kernel_names_the_users_file(silu_task_copy):
    from kernelswarm.experiments.run.compiler_messages import naming_the_users_file
    from kernelswarm.search import Evaluation, Status, load_task

    task = load_task(silu_task_copy, "cpu")
    start = task.starting_candidate("cpp")
    failed = Evaluation(candidate_id=start.id, status=Status.COMPILE_ERROR,
                        message="kernel.cpp:3:1: error: expected ';' before '}' token")
    named = naming_the_users_file(failed, task, start)
    assert named.message == f"{silu_task_copy / 'silu_and_mul.cpp'}:3:1: error: expected ';' " \
                            "before '}' token"


def test_run_with_a_task_folder_names_the_run_and_the_experiment_after_the_task(
        silu_task_copy, monkeypatch):
    import kernelswarm.experiments.run.execute as execute
    from kernelswarm.experiments.commands.cli import main

    seen = {}

    def fake_run(config, console, resume=None, ray_start=None):  # only the configuration matters
        seen["config"] = config
        raise SystemExit(0)

    monkeypatch.setattr(execute, "run", fake_run)
    with pytest.raises(SystemExit):
        main(["run", "--task", str(silu_task_copy)])
    config = seen["config"]
    assert config.run.name == "silu_and_mul"  # the folder's name, not "quickstart"
    assert (config.tracking.experiment or config.run.name) == "silu_and_mul"


def test_a_log_gets_a_status_line_at_the_start_every_interval_and_at_the_end():
    from kernelswarm.experiments.views.progress import search_view

    console = Console(file=io.StringIO(), width=80)  # a log: not a terminal
    with search_view(console, every_s=60.0) as view:
        for records in (1, 2, 3):  # well inside one interval
            view.update({"records": records, "best": 1.0})
    lines = console.file.getvalue().splitlines()
    assert len(lines) == 2  # the first update's line and the last one, not one per update
    assert "evaluations 1 " in lines[0] and "evaluations 3 " in lines[1]
