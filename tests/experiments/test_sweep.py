"""``kernelswarm sweep``: a 2x2 grid on a Ray cluster joined by address (real g++, sandbox,
Parquet, SQLite MLflow), resumed after part of it was lost; a bad axis refused by name.

The fair sharing of the pool's workers between cells is tested in tests/cluster/test_fair_share.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernelswarm.experiments.commands.cli import main
from kernelswarm.experiments.sinks import read_evaluations

SWEEP = """
[sweep]
name = "grid"
out_dir = "{out}/sweeps"
max_workers = 1

[base]
search.candidates_per_lineage = 1
search.wall_time_s = 1800  # cells wait their turns for the one worker: no deadline on a slow CI
search.tester = false
search.confirm_top = 0
timing.budget_s = 0.05
timing.min_repeats = 3
timing.max_repeats = 20
evaluator.seeds = 1          # the sandbox's checks are tested elsewhere: keep each one short
evaluator.check_heldout = false
evaluator.cache_dir = "{cache}"
tracking.mlflow_uri = "sqlite:///{out}/mlflow.db"

[grid]
seeds = [0, 1]
"search.lineages" = [1, 2]
"""

# One Ray cluster (a local head joined by address, as a user's existing cluster would be); the
# sweep, then the same sweep folder with a cell's summary and another whole cell lost (the
# driver killed part way), resumed.
_SCRIPT = textwrap.dedent("""
    import json, shutil, sys
    from pathlib import Path
    from ray.cluster_utils import Cluster
    from kernelswarm.experiments.commands.cli import main

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    out, sweep_file = Path(sys.argv[1]), sys.argv[2]
    first = main(["sweep", sweep_file, "--address", cluster.address])
    sweep_dir = next((out / "sweeps").iterdir())
    cells = sorted(p for p in sweep_dir.iterdir() if (p / "config.json").is_file())
    parts = {p.name: sorted(f.name for f in (p / "evaluations").iterdir()) for p in cells}
    (cells[1] / "summary.json").unlink()
    shutil.rmtree(cells[2])
    print("BEFORE", json.dumps(parts))
    second = main(["sweep", "--resume", str(sweep_dir), "--address", cluster.address])
    print("RESULT", json.dumps({"first": first, "second": second, "sweep_dir": str(sweep_dir)}))
    cluster.shutdown()
""")


def _line(output: str, tag: str) -> dict:
    line = next((ln for ln in output.splitlines() if ln.startswith(tag + " ")), None)
    assert line is not None, output[-4000:]
    return json.loads(line.split(" ", 1)[1])


@pytest.fixture(scope="module")
def swept(tmp_path_factory, compile_cache):
    out = tmp_path_factory.mktemp("sweep")
    sweep_file = out / "grid.toml"
    sweep_file.write_text(SWEEP.format(out=out, cache=compile_cache))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, str(out), str(sweep_file)],
                          capture_output=True, text=True, timeout=600, cwd=out, env=env)
    output = proc.stdout + proc.stderr
    result = _line(proc.stdout, "RESULT")
    return result, _line(proc.stdout, "BEFORE"), proc.stdout, output, out


def _cells(sweep_dir: Path) -> list[Path]:
    return sorted(p for p in sweep_dir.iterdir() if (p / "config.json").is_file())


@pytest.mark.slow
def test_a_grid_gives_a_run_folder_and_a_table_row_per_cell(swept):
    result, _, stdout, output, _ = swept
    assert result["first"] == 0 and result["second"] == 0, output[-4000:]
    sweep_dir = Path(result["sweep_dir"])
    cells = _cells(sweep_dir)
    assert [c.name for c in cells] == ["00-seed=0+lineages=1", "01-seed=0+lineages=2",
                                       "02-seed=1+lineages=1", "03-seed=1+lineages=2"]
    for cell in cells:
        summary = json.loads((cell / "summary.json").read_text())
        assert summary["best"] is not None and (cell / "best").is_dir(), cell
        assert (cell / "report" / "report.html").is_file()
        assert json.loads((cell / "config.json").read_text())["tracking"]["experiment"] == "grid"
    import pandas as pd

    table = pd.read_parquet(sweep_dir / "cells.parquet")
    assert list(table["cell"]) == ["seed=0,lineages=1", "seed=0,lineages=2",
                                   "seed=1,lineages=1", "seed=1,lineages=2"]
    assert list(table["lineages"]) == [1, 2, 1, 2] and list(table["seed"]) == [0, 0, 1, 1]
    assert set(table["status"]) == {"finished"}
    assert (table["speedup_vs_start"] > 0).all() and (table["speedup_vs_best"] > 0).all()
    assert (table["evaluations"] >= 1).all() and (table["eval_s"] > 0).all()
    # Each lineage proposed its one candidate: start + one record per lineage.
    assert list(table["records"]) == [2, 3, 2, 3]
    # The closing table, in an 80-column log: one line per cell.
    closing = stdout[stdout.rindex("kernelswarm sweep grid: best kernel per cell"):]
    assert all(name in closing for name in table["cell"])
    assert max(len(line) for line in closing.splitlines()[:10]) <= 80
    # The console and the sweep's report count the same records for each cell.
    report = (sweep_dir / "report" / "report.md").read_text()
    for name, folder, records in zip(table["cell"], table["folder"], table["records"],
                                     strict=True):
        console_row = next(ln for ln in closing.splitlines() if name in ln)
        assert str(records) in [c.strip() for c in console_row.split("│")], console_row
        report_row = next(ln for ln in report.splitlines() if ln.startswith(f"| {folder} |"))
        assert f"| {records} |" in report_row, report_row


@pytest.mark.slow
def test_the_cells_pool_counts_what_parquet_records(swept):
    """The workers evaluated exactly what the cells' Parquet holds as evaluated."""
    result, _, _, _, _ = swept
    # One lineage each (no verdict shared between lineages), each searched in one session.
    for cell in _cells(Path(result["sweep_dir"]))[::2]:
        records = read_evaluations(cell).to_pandas().drop_duplicates("seq")
        executed = json.loads((cell / "summary.json").read_text())["utilisation"]
        assert executed["cell_evaluations"] == (records["eval_s"] > 0).sum(), cell


@pytest.mark.slow
def test_workers_json_says_what_the_worker_did_in_each_session(swept):
    import pandas as pd

    result, _, stdout, _, _ = swept
    sweep_dir = Path(result["sweep_dir"])
    table = pd.read_parquet(sweep_dir / "cells.parquet").set_index("folder")
    second = json.loads((sweep_dir / "workers.json").read_text())
    [first_file] = sweep_dir.glob("workers-*.json")  # the first session's, kept by the resume
    first = json.loads(first_file.read_text())
    # The resume judged only the cell that was lost whole; its evaluator was built once.
    assert second["summary"]["evaluations"] == table.loc["02-seed=1+lineages=1", "evaluations"]
    # (the resumed cell with nothing left to judge may still have had the worker prepared)
    assert len({i["cell"] for i in second["intervals"] if i["kind"] == "evaluate"}) == 1
    assert first["summary"]["evaluations"] >= table.loc[
        ["00-seed=0+lineages=1", "01-seed=0+lineages=2", "03-seed=1+lineages=2"],
        "evaluations"].sum()
    for session in (first, second):
        summary = session["summary"]
        assert summary["workers"] == 1 and len(session["workers"]) == 1
        assert 0 < summary["busy"] <= 1 and summary["busy_by_minute"]
        # the cells share one evaluator (seeds and lineage counts do not change it)
        assert sum(summary["calibrations"].values()) == 1, summary
    assert "evaluation workers: 1, busy" in stdout


@pytest.mark.slow
def test_resume_finishes_the_lost_cells_and_evaluates_nothing_recorded(swept):
    result, before, stdout, _, _ = swept
    cells = _cells(Path(result["sweep_dir"]))
    after = {c.name: sorted(f.name for f in (c / "evaluations").iterdir()) for c in cells}
    # Finished cells were left alone; the cell whose summary was lost kept its records and
    # evaluated nothing again; the cell that was lost whole ran again.
    assert after["00-seed=0+lineages=1"] == before["00-seed=0+lineages=1"]
    assert after["03-seed=1+lineages=2"] == before["03-seed=1+lineages=2"]
    assert after["01-seed=0+lineages=2"] == before["01-seed=0+lineages=2"]
    resumed = json.loads((cells[1] / "summary.json").read_text())
    assert resumed["utilisation"]["cell_evaluations"] == 0
    assert read_evaluations(cells[2]).to_pandas()["seq"].nunique() == 2
    assert "4 cells, 2 to run" in stdout


@pytest.mark.slow
def test_mlflow_nests_cells_under_the_sweep_and_lineages_under_cells(swept):
    from mlflow.tracking import MlflowClient

    _, _, _, _, out = swept
    client = MlflowClient(tracking_uri=f"sqlite:///{out}/mlflow.db")
    experiment = client.get_experiment_by_name("grid")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    sweeps = [r for r in runs if r.data.tags.get("kind") == "sweep"]
    assert len(sweeps) == 1 and sweeps[0].info.status == "FINISHED"
    sweep_id = sweeps[0].info.run_id
    cell_runs = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == sweep_id]
    # Four cells, and a new run for the cell whose folder was lost (searched afresh); the cell
    # resumed from its records goes on in its own run.
    assert len(cell_runs) == 5
    assert {Path(r.data.tags["run_dir"]).name for r in cell_runs} == {
        "00-seed=0+lineages=1", "01-seed=0+lineages=2", "02-seed=1+lineages=1",
        "03-seed=1+lineages=2"}
    for cell in cell_runs:
        lineages = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == cell.info.run_id]
        assert lineages and all("lineage" in r.data.tags for r in lineages)
    metrics = sweeps[0].data.metrics
    assert metrics["cells_finished"] == 4
    # A cell's figures under its folder's name (MLflow's key characters: "=" and "+" as "_").
    assert metrics["speedup_vs_start/00-seed_0_lineages_1"] > 0


@pytest.mark.slow
def test_the_cell_table_reads_in_duckdb(swept):
    duckdb = pytest.importorskip("duckdb")
    sweep_dir = Path(swept[0]["sweep_dir"])
    rows = duckdb.sql(f"select cell, records from '{sweep_dir / 'cells.parquet'}' "
                      f"order by cell").fetchall()
    assert [r[1] for r in rows] == [2, 3, 2, 3]


def test_an_invalid_axis_is_refused_by_name_before_anything_starts(tmp_path, capsys):
    sweep_file = tmp_path / "bad.toml"
    sweep_file.write_text(f'[sweep]\nout_dir = "{tmp_path}/sweeps"\n'
                          '[grid]\n"search.lineagez" = [1, 2]\n')
    assert main(["sweep", str(sweep_file)]) == 2
    assert "search.lineagez: unknown key" in capsys.readouterr().out
    sweep_file.write_text(f'[sweep]\nout_dir = "{tmp_path}/sweeps"\n'
                          '[grid]\n"search.lineages" = [2, 0]\n')
    assert main(["sweep", str(sweep_file)]) == 2
    text = capsys.readouterr().out
    assert "cell 'lineages=0'" in text and "search.lineages" in text
    sweep_file.write_text('[grid]\n"tracking.mlflow_uri" = ["sqlite:///a.db"]\n')
    assert main(["sweep", str(sweep_file)]) == 2
    assert "tracking.mlflow_uri: shared by every cell" in capsys.readouterr().out
    sweep_file.write_text('[grid]\ntasks = ["no_such_task"]\n')
    assert main(["sweep", str(sweep_file)]) == 2
    assert "task.name: 'no_such_task' is neither a built-in task" in capsys.readouterr().out
    assert not (tmp_path / "sweeps").exists()


def test_the_ready_gpu_sweep_expands_to_astras_three_kernels_by_two_languages():
    from kernelswarm.experiments.config import QUICKSTART
    from kernelswarm.experiments.sweep.sweep_file import load_sweep

    spec = load_sweep(QUICKSTART.with_name("sweep_gpu.toml"))
    assert [(c.config.task.name, c.config.task.language) for c in spec.cells] == [
        (task, language) for task in ("silu_and_mul", "fused_add_rmsnorm", "merge_attn_states_lse")
        for language in ("cuda", "triton")]
    assert {(c.config.search.lineages, c.config.evaluator.device) for c in spec.cells} == {
        (4, "cuda")}
    # every task has a starting kernel in both languages
    for cell in spec.cells:
        assert cell.config.task_path().joinpath("task.py").is_file()
        from kernelswarm.search import load_task

        load_task(cell.config.task_path(), "cuda").kernel(cell.config.task.language)


def test_a_cell_counts_one_evaluation_per_judged_candidate():
    from kernelswarm.experiments.sweep.results import judged

    def record(seq, candidate, eval_s, metrics="{}"):
        return {"seq": seq, "candidate_id": candidate, "eval_s": eval_s, "metrics": metrics}

    records = [record(0, "start", 1.5),
               record(1, "a", 1.0), record(2, "a", 1.0),  # two lineages proposed kernel a
               record(3, "b", 0.9, '{"reused_from": "a"}'),  # built to a's binary
               record(4, "c", 0.0),  # did not build
               record(5, "d", 2.0)]
    assert [r["seq"] for r in judged(records)] == [0, 1, 5]
