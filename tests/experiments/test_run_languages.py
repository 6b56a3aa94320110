"""A run searching two kernel languages at once (``search.languages``) on this CPU: cpp and
triton (Triton's interpreter), lineages side by side, one best overall, each language's best
reported, no kernel crossing from one language to the other."""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path

import pytest
from rich.console import Console

from kernelswarm.experiments.config import ConfigError, load_config
from kernelswarm.experiments.run.execute import run
from kernelswarm.experiments.run.folder import open_run_folder
from kernelswarm.experiments.run.resume import replay_records
from kernelswarm.experiments.sinks import read_evaluations
from kernelswarm.search import Archive

pytestmark = pytest.mark.slow

# Triton's interpreter runs every program of a grid in Python: shapes a few rows long keep one
# of its evaluations to seconds.
SMALL_SHAPES = """TUNING_SHAPES = {
    "cpu": [
        {"tokens": 2, "d": 512, "dtype": "float32"},
        {"tokens": 4, "d": 1024, "dtype": "float32"},
    ],
    "cuda": ["""


def _small_task(folder: Path) -> Path:
    task = folder / "task.py"
    text, count = re.subn(r'TUNING_SHAPES = \{\n    "cpu": \[\n.*?\],\n    "cuda": \[',
                          SMALL_SHAPES, task.read_text(), count=1, flags=re.S)
    assert count == 1, "the silu_and_mul task's TUNING_SHAPES layout changed"
    task.write_text(text)
    return folder


@pytest.fixture(scope="module")
def two_language_run(tmp_path_factory, compile_cache, ray_session):
    """(outcome, console text) of a cpp + triton run: one lineage each, 2 candidates each,
    migrants offered every step, the best kernel of each language confirmed once."""
    import shutil

    from tests.conftest import SILU_TASK

    folder = tmp_path_factory.mktemp("languages")
    task = _small_task(Path(shutil.copytree(SILU_TASK, folder / "silu_and_mul")))
    config = load_config(None, [
        f'run.out_dir="{folder / "runs"}"', "run.name=languages", f'task.name="{task}"',
        'search.languages=["cpp", "triton"]', "search.lineages=2",
        "search.candidates_per_lineage=2", "search.migration_interval=1",
        "search.migration_topology=\"all\"", "search.tester=false", "search.confirm_top=1",
        "search.confirm_repeats=1", "tracking.mlflow=false", "evaluator.seeds=1",
        "evaluator.check_heldout=false", f'evaluator.cache_dir="{compile_cache}"',
        "timing.budget_s=0.02", "timing.min_repeats=3", "timing.max_repeats=6"])
    console = Console(file=io.StringIO(), width=160)
    outcome = run(config, console)
    return outcome, console.file.getvalue()


def _records(run_dir: Path) -> dict[int, dict]:
    """One row per record (its first shape's), by seq."""
    rows: dict[int, dict] = {}
    for row in read_evaluations(run_dir).to_pylist():
        rows.setdefault(row["seq"], row)
    return rows


def test_each_languages_lineages_run_side_by_side_and_keep_to_their_language(two_language_run):
    outcome, _ = two_language_run
    records = _records(outcome.run_dir)
    starts = {r["language"]: r for r in records.values() if r["lineage"] == -1}
    assert set(starts) == {"cpp", "triton"}  # each language judged from its own start
    assert all(r["status"] == "OK" for r in starts.values())
    searched = [r for r in records.values() if r["lineage"] >= 0]
    for r in searched:  # lineage i searches languages[i % 2], never the other language
        assert r["language"] == ("cpp", "triton")[r["lineage"] % 2], r
    steps = {lineage: sum(r["lineage"] == lineage for r in searched) for lineage in range(2)}
    assert all(steps.values()), steps  # the lineages of both languages recorded their steps
    # Migrants (what a lineage may adopt) are of its own language: with one lineage per
    # language, only its own starting kernel, never the other language's kernels.
    language_of = {r["candidate_id"]: r["language"] for r in records.values()}
    migrations = outcome.run_dir / "migrations.jsonl"
    lines = migrations.read_text().splitlines() if migrations.exists() else []
    for entry in map(json.loads, lines):
        assert {language_of[i] for i in entry["ids"]} == {("cpp", "triton")[entry["lineage"] % 2]}


def test_the_best_overall_is_the_fastest_against_the_reference_and_each_language_reports_its_own(
        two_language_run):
    outcome, console = two_language_run
    summary = json.loads((outcome.run_dir / "summary.json").read_text())
    languages, best = summary["languages"], summary["best"]
    assert set(languages) == {"cpp", "triton"} and languages["cpp"]["reference"]
    assert languages["cpp"]["lineages"] == [0] and languages["triton"]["lineages"] == [1]
    assert [(r["lineage"], r["language"]) for r in summary["lineages"]] == [(0, "cpp"),
                                                                             (1, "triton")]
    # The scale of a language is how its start compares with the reference start, per shape,
    # as the run measured both (Parquet): the interpreter is far slower than compiled C++.
    rows = read_evaluations(outcome.run_dir).to_pylist()
    start_us = {lang: {r["shape"]: r["time_us"] for r in rows
                       if r["lineage"] == -1 and r["language"] == lang} for lang in languages}
    ratios = [start_us["cpp"][s] / start_us["triton"][s] for s in start_us["cpp"]]
    scale = math.exp(sum(map(math.log, ratios)) / len(ratios))
    assert languages["triton"]["start_speedup_vs_reference"] == pytest.approx(scale)
    assert scale < 0.5
    bests = {lang: entry["best"] for lang, entry in languages.items() if entry["best"]}
    assert bests, "neither language found a kernel"
    for lang, entry in bests.items():
        assert entry["speedup_vs_reference"] == pytest.approx(
            entry["speedup_vs_start"] * languages[lang]["start_speedup_vs_reference"])
        assert Path(entry["file"]).is_file()
    # The run's best is the fastest language's best by that common measure, not by the ratio
    # each kernel has against its own language's start.
    winner = max(bests, key=lambda lang: bests[lang]["speedup_vs_reference"])
    assert best["language"] == winner
    assert best["candidate_id"] == bests[winner]["candidate_id"]
    assert best["speedup_vs_reference"] == pytest.approx(bests[winner]["speedup_vs_reference"])
    assert Path(best["file"]).suffix == {"cpp": ".cpp", "triton": ".py"}[winner]
    assert Path(best["file"]).name == f"{best['candidate_id']}{Path(best['file']).suffix}"
    # The closing output: each lineage labelled with its language, one line per language.
    assert re.search(r"cpp \(reference\): best \w+", console)
    assert "triton: " in console and "← best overall" in console
    assert re.search(r"\b1 triton\b", console) and re.search(r"\b0 cpp\b", console)
    assert "report not written" not in console  # the report reads such a run folder too
    assert (outcome.run_dir / "report" / "report.html").is_file()


def test_eval_judges_each_file_of_the_run_in_the_language_the_run_judged_it(two_language_run):
    # (tests/experiments/test_run_eval_agree.py runs eval itself against a run's figure)
    outcome, _ = two_language_run
    summary = json.loads((outcome.run_dir / "summary.json").read_text())
    folder = open_run_folder(outcome.run_dir)
    assert folder.best_file() == Path(summary["best"]["file"])
    best = summary["best"]
    assert folder.language_of(best["candidate_id"]) == best["language"]
    assert folder.recorded(best["candidate_id"])["speedup_vs_start"] == pytest.approx(
        best["speedup_vs_start"])  # the figure eval prints beside its own
    for lang, entry in summary["languages"].items():
        assert folder.language_of(entry["start_candidate"]) == lang


def test_a_language_the_task_cannot_start_from_is_refused_before_anything_starts(tmp_path):
    config = load_config(None, [f'run.out_dir="{tmp_path / "runs"}"', "task.name=gemm",
                                'search.languages=["cpp", "triton"]', "search.lineages=2"])
    with pytest.raises(ConfigError, match=r"search\.languages: task 'gemm' has no starting "
                                          r"kernel in 'triton'"):
        run(config, Console(file=io.StringIO()))
    assert not (tmp_path / "runs").exists()  # no run folder, no cluster
    config = load_config(None, [f'run.out_dir="{tmp_path / "runs"}"',
                                'search.languages=["cpp", "cuda"]', "search.lineages=2"])
    with pytest.raises(ConfigError, match=r"search\.languages: 'cuda' kernels do not run on "
                                          r"evaluator\.device = 'cpu'"):
        run(config, Console(file=io.StringIO()))
    assert not (tmp_path / "runs").exists()


def test_a_resumed_run_ranks_the_languages_as_the_run_did(two_language_run):
    # What a resumed run's (or a restarted tracker's) archive is rebuilt from: the records.
    outcome, _ = two_language_run
    summary = json.loads((outcome.run_dir / "summary.json").read_text())
    folder = open_run_folder(outcome.run_dir)
    archive = Archive()
    for record in replay_records(outcome.run_dir, folder.task_path, "cpu"):
        archive.add(record.candidate, record.evaluation)
    assert list(archive.starts) == ["cpp", "triton"]
    assert archive.scales.scale("triton") == pytest.approx(
        summary["languages"]["triton"]["start_speedup_vs_reference"])


@pytest.mark.gpu
def test_cuda_and_triton_lineages_on_a_gpu(tmp_path, compile_cache, ray_session):
    """The GPU counterpart (docs/search_gpu.md, "Several languages"): cuda and triton kernels
    of silu_and_mul judged on the GPU, ranked against the cuda starting kernel."""
    config = load_config(None, [
        f'run.out_dir="{tmp_path / "runs"}"', "run.name=gpu-languages",
        'search.languages=["cuda", "triton"]', 'evaluator.device="cuda"', "search.lineages=2",
        "search.candidates_per_lineage=4", "search.wall_time_s=300", "tracking.mlflow=false",
        f'evaluator.cache_dir="{compile_cache}"', "timing.budget_s=0.05",
        "evaluator.run_timeout_s=300", "search.confirm_repeats=1"])
    outcome = run(config, Console(file=io.StringIO(), width=160))
    assert all(not r.error for r in outcome.result.lineages)
    summary = json.loads((outcome.run_dir / "summary.json").read_text())
    languages = summary["languages"]
    assert set(languages) == {"cuda", "triton"} and languages["cuda"]["reference"]
    assert languages["triton"]["start_speedup_vs_reference"] > 0
    records = _records(outcome.run_dir)
    assert {r["language"] for r in records.values() if r["lineage"] >= 0} == {"cuda", "triton"}
    assert all(r["device"].startswith("cuda") for r in records.values() if r["status"] == "OK")
    bests = {lang: e["best"] for lang, e in languages.items() if e["best"]}
    winner = max(bests, key=lambda lang: bests[lang]["speedup_vs_reference"])
    assert summary["best"]["language"] == winner
