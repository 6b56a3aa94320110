"""Faults on a real Ray cluster: the tracker's process killed, a lineage that crashes or whose
process dies, a node removed mid-run, the driver killed and the sweep resumed.

Every run here counts what the evaluation workers executed (``CountingEvaluator`` appends one
line per finished evaluation to a file) and checks it against the Parquet records: no recorded
evaluation lost, none recorded twice (one record per (lineage, step) and per seq).
The shared pieces are in fault_support.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest
import ray

from kernelswarm.agents import builtin_roles
from kernelswarm.cluster import ActorTracker, Swarm, SwarmSpec, TrackerActor
from kernelswarm.experiments.config.schema import SearchSection
from kernelswarm.experiments.run.resume import replay_records
from kernelswarm.experiments.sinks import MLflowSink, ParquetSink, read_evaluations
from kernelswarm.experiments.sinks.mlflow_store import mlflow_client
from kernelswarm.search import (
    Budget,
    Evaluation,
    LineageView,
    Migration,
    Origin,
    Plan,
    Planner,
    Roles,
    RunInfo,
    ShapeResult,
    Status,
    load_task,
)
from tests.cluster.fault_support import (
    DRIVER_SCRIPT,
    check_counts,
    cluster,
    counting_module,
    kill_after_a_step,
    records_in,
    settings,
)
from tests.conftest import ROOT, SILU_TASK

pytestmark = pytest.mark.slow


def _kill_process(actor: ray.actor.ActorHandle) -> int:
    """SIGKILL the actor's process (as the kernel's OOM killer or a lost machine would)."""
    pid = ray.get(actor.__ray_call__.remote(lambda self: os.getpid()))
    os.kill(pid, signal.SIGKILL)
    return pid


def _candidates(n: int):
    start = load_task(SILU_TASK).starting_candidate("cpp")
    out = [start]
    for i in range(1, n):
        out.append(start.derive(source=start.source + f"\n// variant {i}\n", lineage=i % 2,
                                origin=Origin(role="coder", move=f"rewrite:{i}")))
    return out


def _ok(candidate, speedup: float) -> Evaluation:
    return Evaluation(candidate.id, Status.OK, "fine", eval_s=0.5, device="cpu: test", shapes=(
        ShapeResult("n=1", correct=True, time_us=10.0 / speedup, speedup_vs_start=speedup),))


def test_a_killed_tracker_is_restarted_from_its_records(tmp_path, ray_session):
    """Records, a claim held, migrants handed out; SIGKILL; everything is as it was, a record
    sent again is not written twice, and MLflow's new parent run holds every record."""
    run = RunInfo("faults-tracker", "faults", tmp_path, "silu_and_mul", "cpp", 2)
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = TrackerActor.remote(run, [ParquetSink(), MLflowSink(store, "faults")], 4,
                                  migration=Migration(interval=1, count=1),
                                  replay=partial(replay_records, tmp_path, SILU_TASK))
    port = ActorTracker(tracker, owner=0)
    other = ActorTracker(tracker, owner=1)
    candidates = _candidates(5)
    speedups = [1.0, 1.2, 1.5, 1.1]
    keys = [(-1, 0), (1, 1), (0, 1), (1, 2)]  # (lineage, step) of each record
    for candidate, speedup, (lineage, step) in zip(candidates, speedups, keys, strict=False):
        assert port.claim(candidate.id) == (None, True)
        port.record(lineage, step, candidate, _ok(candidate, speedup))
    pending = candidates[4]
    assert port.claim(pending.id) == (None, True)  # held by lineage 0 when the tracker dies
    migrants = [c.id for c, _ in port.migrants(0, 1)]
    assert migrants == [candidates[1].id]  # lineage 1's best went to lineage 0
    before = ray.get(tracker.stats.remote())

    _kill_process(tracker)
    # The same record again, as a caller whose call was lost with the process would send it.
    again = port.record(1, 1, candidates[1], _ok(candidates[1], 1.2))

    assert again == 1, "a retried record must return the seq it was first given"
    assert other.claim(pending.id) == (None, False), "a claim held at the kill must be held still"
    assert [c.id for c, _ in port.migrants(0, 1)] == migrants, "a retried call, same migrants"
    # Lineage 0's island holds lineage 1's best since before the restart: the next one comes.
    assert [c.id for c, _ in port.migrants(0, 2)] == [candidates[3].id]
    after = ray.get(tracker.stats.remote())
    assert after["tracker_restarts"] == 1
    assert {k: after[k] for k in ("records", "status", "lineages", "best")} == \
        {k: before[k] for k in ("records", "status", "lineages", "best")}
    for candidate, speedup in zip(candidates[:4], speedups, strict=True):
        assert port.lookup(candidate.id).speedup == pytest.approx(speedup)
    best, _ = ray.get(tracker.best.remote())
    assert best.id == candidates[2].id
    port.record(0, 2, pending, _ok(pending, 1.3))
    summary, errors, _ = ray.get(tracker.close.remote("done"))
    ray.kill(tracker)

    assert errors == [] and summary.records == 5 and summary.migrations == 2
    rows = read_evaluations(tmp_path).to_pylist()
    assert [r["seq"] for r in rows] == [0, 1, 2, 3, 4]
    assert len({(r["lineage"], r["step"]) for r in rows}) == 5
    lines = (tmp_path / "tracker_restarts.jsonl").read_text().splitlines()
    assert [json.loads(line)["records_replayed"] for line in lines] == [4]
    # MLflow: the restarted tracker's parent run holds every record, the lost ones included.
    client = mlflow_client(store)
    experiment = client.get_experiment_by_name("faults").experiment_id
    runs = client.search_runs([experiment], "tags.run_id = 'faults-tracker'")
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    # the restarted tracker's, and the lost one's if its MLflow had opened before the kill
    # (the tracker does not wait for it: cluster/sink_actor.py)
    assert len([r for r in parents if r.info.status == "FINISHED"]) == 1 and len(parents) <= 2
    finished = next(r for r in parents if r.info.status == "FINISHED")
    history = client.get_metric_history(finished.info.run_id, "global_best")
    assert sorted(m.step for m in history) == [0, 1, 2, 3, 4]


class CrashOnce(Planner):
    """The built-in planner, except that at ``step`` it fails once (the marker file remembers):
    ``raise`` raises in the lineage's actor, ``exit`` ends the actor's process at once."""

    def __init__(self, inner: Planner, marker: Path, how: str, step: int) -> None:
        self.inner, self.marker, self.how, self.step = inner, marker, how, step

    def plan(self, view: LineageView) -> Plan:
        if view.step == self.step and not self.marker.exists():
            self.marker.write_text(self.how)
            if self.how == "exit":
                os._exit(3)
            raise RuntimeError("the planner failed (this test's fault)")
        return self.inner.plan(view)


def crashing_roles(folder: Path, seed: int) -> Roles:
    """Lineage 0 (seed 0) raises after its first step; lineage 1 (seed 1) loses its process
    before its first."""
    roles = builtin_roles(seed)
    how, step = ("raise", 1) if seed == 0 else ("exit", 0)
    return replace(roles, planner=CrashOnce(roles.planner, folder / f"crashed-{seed}", how, step))


def test_a_crashed_lineage_is_restarted_from_its_records(tmp_path, compile_cache, ray_session):
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # actors need CrashOnce
    counting = counting_module(tmp_path)
    start = load_task(SILU_TASK).starting_candidate("cpp")
    run = RunInfo("faults-lineage", "faults", tmp_path, "silu_and_mul", "cpp", 2)
    spec = SwarmSpec(
        run=run, sinks=[ParquetSink()], start=start,
        make_evaluator=partial(counting.CountingEvaluator, SILU_TASK, "cpp",
                               settings(compile_cache)),
        make_roles=partial(crashing_roles, tmp_path), seeds=[0, 1], budget=Budget(candidates=2),
        workers=1, worker_resources={"num_cpus": 0}, tuner_journal=tmp_path / "optuna.journal",
        migration=Migration(interval=1000), replay=partial(replay_records, tmp_path, SILU_TASK))
    swarm = Swarm(spec)
    swarm.start()
    deadline = time.monotonic() + 300
    while not swarm.done(timeout=0.5):
        assert time.monotonic() < deadline, "the lineages did not finish in time"
    result = swarm.finish()

    by_lineage = {r.lineage: r for r in result.lineages}
    assert [by_lineage[i].restarts for i in (0, 1)] == [1, 1]
    assert "the planner failed" in by_lineage[0].crashes[0]
    assert "actor died" in by_lineage[1].crashes[0]
    assert all(not r.error and r.steps == 2 for r in result.lineages), result.lineages
    counts = check_counts(tmp_path, Path(counting.COUNTER))
    rows = read_evaluations(tmp_path).to_pylist()
    steps = sorted({(r["lineage"], r["step"]) for r in rows})
    assert steps == [(-1, 0), (0, 1), (0, 2), (1, 1), (1, 2)]
    assert counts["records"] == 5


_NODE_SCRIPT = textwrap.dedent("""
    import json, sys, time
    from functools import partial
    from pathlib import Path

    import ray
    from ray.cluster_utils import Cluster

    from kernelswarm.agents import builtin_roles
    from kernelswarm.cluster import Swarm, SwarmSpec
    from kernelswarm.experiments.run.resume import replay_records
    from kernelswarm.experiments.sinks import ParquetSink, read_evaluations
    from kernelswarm.search import Budget, Migration, RunInfo, load_task
    from tests.cluster.fault_support import counting_module, settings
    from tests.conftest import SILU_TASK

    out, cache = Path(sys.argv[1]), Path(sys.argv[2])
    counting = counting_module(out)
    cluster = Cluster(initialize_head=True, connect=True, head_node_args={"num_cpus": 1})
    # The worker and both lineages need a "site" slot, which only the doomed node has (nothing
    # of theirs can land on the head); a spare node with slots joins once the doomed one is
    # removed, as an autoscaler's replacement would, and takes what is restarted.
    doomed = cluster.add_node(num_cpus=3, resources={"site": 3})
    cluster.wait_for_nodes()
    site = {"site": 1}
    spec = SwarmSpec(
        run=RunInfo("faults-node", "faults", out, "silu_and_mul", "cpp", 2),
        sinks=[ParquetSink()], start=load_task(SILU_TASK).starting_candidate("cpp"),
        make_evaluator=partial(counting.CountingEvaluator, SILU_TASK, "cpp", settings(cache)),
        make_roles=builtin_roles, seeds=[0, 1], budget=Budget(candidates=2), workers=1,
        worker_resources={"num_cpus": 1, "resources": site},
        lineage_options={"resources": site}, tuner_journal=out / "optuna.journal",
        migration=Migration(interval=1000), replay=partial(replay_records, out, SILU_TASK))
    began = time.monotonic()
    swarm = Swarm(spec)
    swarm.start()
    print("started", time.monotonic() - began, flush=True)
    def node(actor):
        return ray.get(actor.__ray_call__.remote(
            lambda self: ray.get_runtime_context().get_node_id()))

    placed = [node(r) == doomed.node_id for r in [*swarm.lineage_actors, *swarm.pool.workers]]
    while swarm.stats()["records"] < 2:  # the start and a first step of a lineage
        time.sleep(0.2)
    cluster.remove_node(doomed)
    removed_at = swarm.stats()["records"]
    cluster.add_node(num_cpus=3, resources={"site": 3})  # what is restarted waits for it
    deadline = time.monotonic() + 400
    while not swarm.done(timeout=0.5) and time.monotonic() < deadline:
        pass
    result = swarm.finish()
    print("RESULT", json.dumps({
        "on_doomed": placed, "removed_at": removed_at,
        "seconds": time.monotonic() - began,
        "restarts": [r.restarts for r in result.lineages],
        "errors": [r.error for r in result.lineages],
        "steps": [r.steps for r in result.lineages],
        "worker_deaths": result.utilisation.get("worker_deaths")}))
    ray.shutdown()
    cluster.shutdown()
""")


def _result(proc) -> dict:
    output = proc.stdout + proc.stderr
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")), None)
    assert line is not None, output[-4000:]
    return json.loads(line.split(" ", 1)[1])


def test_a_node_removed_mid_run_loses_no_record(tmp_path, compile_cache):
    # A cluster of its own, in its own process: this one may hold the session's Ray instance.
    proc = subprocess.run([sys.executable, "-c", _NODE_SCRIPT, str(tmp_path), str(compile_cache)],
                          capture_output=True, text=True, timeout=500, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    result = _result(proc)
    *lineages, worker = result["on_doomed"]
    assert worker and all(lineages), f"not all started on the node to remove: {result}"
    assert result["removed_at"] < 5, "the node was removed after the run had finished"
    assert all(not e for e in result["errors"]), result["errors"]
    assert result["steps"] == [2, 2]
    for there, restarts in zip(lineages, result["restarts"], strict=True):
        assert restarts >= there, result  # a lineage on the removed node was restarted
    # Evaluations in flight on the node may be executed again (by the worker's retry, or by
    # the restarted lineage), and ones whose lineage died before recording stay unrecorded.
    counts = check_counts(tmp_path, tmp_path / "executed.jsonl", unrecorded=2, repeated=3)
    assert counts["records"] == 5


_SWEEP = """
[sweep]
name = "killed"
out_dir = "{out}/sweeps"

[base]
search.lineages = 1
search.candidates_per_lineage = 2
search.tester = false
evaluator.cache_dir = "{cache}"
evaluator.workers = 1
evaluator.seeds = 1
timing.budget_s = 0.05
timing.min_repeats = 3
timing.warmup = 1
tracking.mlflow = false
{no_confirmation}
[grid]
seeds = [0, 1]
"""


def test_a_killed_driver_is_finished_by_run_and_sweep_resume(tmp_path, compile_cache):
    """A sweep of two cells is killed with SIGKILL once a cell has recorded a step; that cell is
    finished by ``run --resume`` (a sweep's cell is a run folder), the other by
    ``sweep --resume``."""
    counting_module(tmp_path)
    sweep_file = tmp_path / "killed.toml"
    confirming = "confirm_top" in SearchSection.model_fields  # confirming would evaluate again
    sweep_file.write_text(_SWEEP.format(
        out=tmp_path, cache=compile_cache,
        no_confirmation="search.confirm_top = 0" if confirming else ""))
    with cluster() as address:
        driver = [sys.executable, "-c", DRIVER_SCRIPT, str(tmp_path / "counting_evaluator.py")]
        log = tmp_path / "killed.log"
        with log.open("w") as out:
            killed = subprocess.Popen([*driver, "sweep", str(sweep_file), "--address", address],
                                      stdout=out, stderr=subprocess.STDOUT)
        cell = kill_after_a_step(killed, lambda: [
            c for c in tmp_path.glob("sweeps/killed-*/*") if (c / "config.json").exists()], log)
        before = records_in(cell)
        run = subprocess.run([*driver, "run", "--resume", str(cell), "--address", address],
                             capture_output=True, text=True, timeout=400)
        assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
        assert f"{before} evaluations already recorded" in run.stdout
        sweep = subprocess.run([*driver, "sweep", "--resume", str(cell.parent), "--address",
                                address], capture_output=True, text=True, timeout=400)
        assert sweep.returncode == 0, (sweep.stdout + sweep.stderr)[-4000:]
    cells = sorted(c for c in cell.parent.iterdir() if (c / "config.json").exists())
    assert len(cells) == 2 and "2 cells, 1 to run" in sweep.stdout
    for folder in cells:
        summary = json.loads((folder / "summary.json").read_text())
        assert [lineage["steps"] for lineage in summary["lineages"]] == [2]
    # One worker for both cells: at most the evaluation in flight at the kill was lost or is
    # done again.
    counts = check_counts(cells, tmp_path / "executed.jsonl", unrecorded=1, repeated=1)
    assert counts["records"] == 6


def test_a_tracker_without_replay_is_not_restarted_over_its_records(tmp_path, ray_session):
    """Without a replay a restarted tracker would hand out the seqs of records it lost (and a
    sink would write over them): it stays dead instead."""
    run = RunInfo("faults-noreplay", "faults", tmp_path, "silu_and_mul", "cpp", 1)
    tracker = TrackerActor.remote(run, [ParquetSink()], 4)
    start = _candidates(1)[0]
    assert ray.get(tracker.record.remote(-1, 0, start, _ok(start, 1.0))) == 0
    _kill_process(tracker)
    with pytest.raises(ray.exceptions.RayActorError, match="no replay"):
        ActorTracker(tracker).lookup(start.id)
    assert [r["seq"] for r in read_evaluations(tmp_path).to_pylist()] == [0]
