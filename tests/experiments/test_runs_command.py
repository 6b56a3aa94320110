"""``kernelswarm runs``: past runs listed and compared from the command line, read from the run
folders two real searches left (real Ray, g++, the sandbox, Parquet)."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest

from kernelswarm.experiments.authoring.task_folders import scaffold_task
from kernelswarm.experiments.commands.cli import main

TINY = ["search.lineages=1", "search.confirm_top=0", "search.tester=false", "evaluator.seeds=1",
        "evaluator.check_heldout=false", "timing.budget_s=0.05", "timing.min_repeats=3",
        "timing.max_repeats=20", "tracking.mlflow=false"]


@pytest.fixture(scope="module")
def past(tmp_path_factory, compile_cache, ray_session):
    """A folder with ``runs/``: two finished runs (one and two candidates) and a copy of the
    first with no summary.json, as a run killed before its end leaves it."""
    folder = tmp_path_factory.mktemp("past-runs")
    for name, candidates in (("one", 1), ("two", 2)):
        settings = [*TINY, f"search.candidates_per_lineage={candidates}", f"run.name={name}",
                    f'run.out_dir="{folder / "runs"}"', f'evaluator.cache_dir="{compile_cache}"']
        assert main(["run", *(a for s in settings for a in ("--set", s))]) == 0
        time.sleep(1.1)  # folder names carry the second they started
    first, second = (next((folder / "runs").glob(f"{n}-*")) for n in ("one", "two"))
    killed = folder / "runs" / first.name.replace("one-", "killed-")
    shutil.copytree(first, killed)
    (killed / "summary.json").unlink()
    # a task of one's own whose starting kernel does not compile: its folder is kept
    task = scaffold_task("my_op", folder)
    kernel = task / "my_op.cpp"
    kernel.write_text(kernel.read_text().replace("out[i] = alpha * x[i] + y[i];",
                                                 "out[i] = undefined_z[i];"))
    settings = [*TINY, f'run.out_dir="{folder / "runs"}"', f'evaluator.cache_dir="{compile_cache}"']
    assert main(["run", "--task", str(task), *(a for s in settings for a in ("--set", s))]) == 1
    return folder, first, second, killed


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


@pytest.mark.slow
def test_runs_lists_every_run_folder_with_what_its_summary_says(past, capsys, monkeypatch):
    folder, first, second, killed = past
    monkeypatch.setenv("COLUMNS", "220")
    monkeypatch.chdir(folder)
    capsys.readouterr()
    assert main(["runs"]) == 0  # run.out_dir of the quickstart: runs/
    out = capsys.readouterr().out
    lines = {name: next(ln for ln in out.splitlines() if name in ln)
             for name in (first.name, second.name, killed.name)}
    for run in (first, second):
        summary, line = _summary(run), lines[run.name]
        stamp = re.search(r"-(\d{4})(\d\d)(\d\d)-(\d\d)(\d\d)\d\d-", run.name).groups()
        assert "{}-{}-{} {}:{}".format(*stamp) in line
        assert "silu_and_mul" in line and " cpp " in line and " run " in line
        assert summary["baselines"]["device"] in line and "finished" in line
        assert f"{summary['best']['speedup_vs_start']:.3f}x" in line
        assert f"{summary['best']['speedup_vs_best']:.3f}x" in line and "(eager)" in line
        assert line.rstrip().endswith(f"{summary['wall_s']:.0f}")
    assert "unfinished" in lines[killed.name]
    broken = next(ln for ln in out.splitlines() if "my_op-" in ln)
    assert "start failed (COMPILE_ERROR)" in broken and "my_op" in broken
    # oldest first: the newest lies nearest the prompt
    order = [out.index(first.name), out.index(second.name)]
    assert order == sorted(order)


@pytest.mark.slow
def test_runs_compare_puts_two_runs_side_by_side_shape_by_shape(past, capsys, monkeypatch):
    folder, first, second, _ = past
    monkeypatch.setenv("COLUMNS", "220")
    monkeypatch.chdir(folder)
    capsys.readouterr()
    assert main(["runs", "compare", first.name, second.name]) == 0  # by name in runs/
    out = capsys.readouterr().out
    a, b = (_summary(r)["best"] for r in (first, second))
    assert f"A: {first.name}" in out and f"B: {second.name}" in out
    shapes_b = {s["shape"]: s for s in b["shapes"]}
    for shape in a["shapes"]:
        other = shapes_b[shape["shape"]]
        row = next(ln for ln in out.splitlines() if f" {shape['time_us']:.2f}" in ln
                   and ln.split()[1].startswith("d="))
        assert f" {other['time_us']:.2f}" in row
        assert f"{shape['time_us'] / other['time_us']:.3f}x" in row  # B vs A
    assert "warm cache (not flushed)" in out and "differ in" not in out


def test_runs_names_what_it_cannot_read(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["runs"]) == 2
    assert "runs: no such folder" in capsys.readouterr().out
    (tmp_path / "runs").mkdir()
    assert main(["runs"]) == 0 and "no run folders in" in capsys.readouterr().out
    assert main(["runs", "compare", "a"]) == 2
    assert main(["runs", "compare", "a", "b"]) == 2
    assert "a: not a run folder" in capsys.readouterr().out
