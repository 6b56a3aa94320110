"""Faults on a real Ray cluster: the tracker's process killed, a lineage that crashes or whose
process dies, a node removed mid-run, the driver killed and the run resumed.

Every run here counts what the evaluation workers executed (``CountingEvaluator`` appends one
line per finished evaluation to a file) and checks it against the Parquet records: no recorded
evaluation lost, none recorded twice (one record per (lineage, step) and per seq).
"""

from __future__ import annotations

import json
import os
import signal
from functools import partial

import pytest
import ray

from kernelswarm.cluster import ActorTracker, TrackerActor
from kernelswarm.experiments.resume import replay_records
from kernelswarm.experiments.sinks import MLflowSink, ParquetSink, read_evaluations
from kernelswarm.experiments.sinks.mlflow_sink import mlflow_client
from kernelswarm.search import Evaluation, Origin, RunInfo, ShapeResult, Status, load_task
from tests.conftest import SILU_TASK

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
    run = RunInfo("faults-tracker", "faults", tmp_path, "silu_and_mul", "cpp", 2)
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = TrackerActor.remote(run, [ParquetSink(), MLflowSink(store, "faults")], 4,
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
    before = ray.get(tracker.stats.remote())

    _kill_process(tracker)
    # The same record again, as a caller whose call was lost with the process would send it.
    again = port.record(1, 1, candidates[1], _ok(candidates[1], 1.2))

    assert again == 1, "a retried record must return the seq it was first given"
    assert other.claim(pending.id) == (None, False), "the held claim must be renewed"
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

    assert errors == [] and summary.records == 5
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
    assert len(parents) == 2  # the lost tracker's and the restarted one's
    finished = next(r for r in parents if r.info.status == "FINISHED")
    history = client.get_metric_history(finished.info.run_id, "global_best")
    assert sorted(m.step for m in history) == [0, 1, 2, 3, 4]
