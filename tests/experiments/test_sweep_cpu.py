"""The ready CPU sweep, run by name as a user of an installed package would (real Ray, g++, the
sandbox, Parquet, SQLite MLflow), and what its console says: the last progress line counts what
the workers' summary line and the closing table count."""

from __future__ import annotations

import io
import json
import os
import re
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from kernelswarm.experiments.commands.cli import main

SHORT = ["search.candidates_per_lineage=1", "search.lineages=1", "search.confirm_top=1",
         "search.confirm_repeats=2", "search.tester=false", "evaluator.seeds=1",
         "evaluator.check_heldout=false", "timing.budget_s=0.05", "timing.min_repeats=3",
         "timing.max_repeats=20"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory, compile_cache, ray_session):
    """(exit code, console text with its line breaks undone, sweep folder) of ``kernelswarm
    sweep sweep_cpu`` run in a folder that has no sweep file."""
    folder = tmp_path_factory.mktemp("sweep-cpu")
    here = os.getcwd()
    out = io.StringIO()
    os.chdir(folder)
    try:
        with redirect_stdout(out):
            code = main(["sweep", "sweep_cpu", "--set", f'evaluator.cache_dir="{compile_cache}"',
                         *(a for s in SHORT for a in ("--set", s))])
    finally:
        os.chdir(here)
    found = sorted((folder / "sweeps").glob("cpu-grid-*"))
    return code, " ".join(out.getvalue().split()), found[0] if found else None


@pytest.mark.slow
def test_the_ready_cpu_sweep_runs_by_name_on_this_machines_cpu(swept):
    import pandas as pd

    code, out, sweep_dir = swept
    assert code == 0 and sweep_dir is not None, out[-3000:]
    table = pd.read_parquet(sweep_dir / "cells.parquet")
    assert list(table["task"]) == ["silu_and_mul", "softmax"]
    assert set(table["language"]) == {"cpp"} and set(table["status"]) == {"finished"}
    assert "(2 CPUs, 0 GPUs)" in out


@pytest.mark.slow
def test_the_last_progress_line_counts_what_the_summary_and_the_table_count(swept):
    import pandas as pd

    code, out, sweep_dir = swept
    assert code == 0 and sweep_dir is not None, out[-3000:]
    lines = re.findall(r"records (\d+) worker evaluations (\d+)", out)
    assert lines, out[-3000:]
    records, evaluations = map(int, lines[-1])
    (summary,) = re.findall(r"evaluation workers: 1, busy .*?, (\d+) evaluations \(", out)
    assert evaluations == int(summary)
    table = pd.read_parquet(sweep_dir / "cells.parquet")
    assert records == table["records"].sum()
    # what the workers judged: the records that ran on one, and the best kernels' repeats
    repeats = 0
    for folder in table["folder"]:
        summary = json.loads((sweep_dir / folder / "summary.json").read_text())
        kernels = (summary.get("confirmation") or {}).get("kernels", [])
        repeats += sum(len(k["speedup_vs_start"]) for k in kernels)
    assert evaluations == table["evaluations"].sum() + repeats


def test_a_sweep_name_that_is_no_ready_one_lists_them(tmp_path, capsys):
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert main(["sweep", "sweep_nothing"]) == 2
    finally:
        os.chdir(here)
    out = " ".join(capsys.readouterr().out.split())
    assert "sweep_nothing: no such sweep file" in out and "sweep_cpu, sweep_gpu" in out
    assert not (tmp_path / "sweeps").exists()


def test_the_ready_cpu_sweep_lies_in_the_package_and_runs_on_the_cpu():
    import kernelswarm.experiments
    from kernelswarm.experiments.sweep.sweep_file import load_sweep

    assert (Path(kernelswarm.experiments.__file__).parent / "sweep_cpu.toml").is_file()
    spec = load_sweep("sweep_cpu")
    assert {c.config.evaluator.device for c in spec.cells} == {"cpu"}
    assert len(spec.cells) == 2
