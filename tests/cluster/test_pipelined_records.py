"""A lineage's port to the tracker (``ActorTracker``) as ``LineageActor`` uses it: records
pipelined (sent, made durable while the next step runs) and no call for migrants on steps that
are not migration steps. A record in flight when the tracker's process is killed is written
exactly once, whichever side of the kill it fell on."""

from __future__ import annotations

import os
import signal
from functools import partial

import pytest
import ray

from kernelswarm.cluster import ActorTracker, TrackerActor
from kernelswarm.experiments.run.resume import replay_records
from kernelswarm.experiments.sinks import ParquetSink, read_evaluations
from kernelswarm.search import (
    Evaluation,
    Migration,
    Origin,
    RunInfo,
    ShapeResult,
    Status,
    load_task,
)
from tests.conftest import SILU_TASK

pytestmark = pytest.mark.slow


def _variants(n: int):
    start = load_task(SILU_TASK).starting_candidate("cpp")
    return [start.derive(source=start.source + f"\n// pipelined {i}\n", lineage=0,
                         origin=Origin(role="coder", move=f"rewrite:{i}")) for i in range(n)]


def _ok(candidate) -> Evaluation:
    return Evaluation(candidate.id, Status.OK, "fine", eval_s=0.1, device="cpu: test", shapes=(
        ShapeResult("n=1", correct=True, time_us=8.0, speedup_vs_start=1.25),))


def test_a_record_in_flight_when_the_tracker_dies_is_written_once(tmp_path, ray_session):
    run = RunInfo("pipelined", "pipelined", tmp_path, "silu_and_mul", "cpp", 1)
    tracker = TrackerActor.remote(run, [ParquetSink()], 4,
                                  replay=partial(replay_records, tmp_path, SILU_TASK))
    port = ActorTracker(tracker, owner=0, pipelined=True)
    first, second, third = _variants(3)
    for step, candidate in enumerate((first, second), start=1):
        assert port.claim(candidate.id) == (None, True)
        assert port.record(0, step, candidate, _ok(candidate)) is None  # sent, not awaited
    # The first record was settled before the second was sent: it is durable already.
    assert [r["step"] for r in read_evaluations(tmp_path).to_pylist()] == [1]

    pid = ray.get(tracker.__ray_call__.remote(lambda actor: os.getpid()))
    os.kill(pid, signal.SIGKILL)  # the second record written, or lost with the process
    port.settle()  # sent again if it was lost
    assert port.claim(third.id) == (None, True)
    port.record(0, 3, third, _ok(third))
    port.settle()
    ray.get(tracker.close.remote("done"))
    ray.kill(tracker)

    rows = read_evaluations(tmp_path).to_pylist()
    assert [(r["step"], r["candidate_id"]) for r in rows] == \
        [(1, first.id), (2, second.id), (3, third.id)]
    assert [r["seq"] for r in rows] == [0, 1, 2]


def test_no_call_for_migrants_on_a_step_that_is_not_a_migration_step(tmp_path, ray_session):
    """The tracker would hand lineage 1's kernel to lineage 0 on any step it is asked about;
    a port told that migrants come every 4 steps asks only on step 4."""
    run = RunInfo("migrants", "migrants", tmp_path, "silu_and_mul", "cpp", 2)
    tracker = TrackerActor.remote(run, [ParquetSink()], 4, migration=Migration(1, count=1))
    other = _variants(1)[0].derive(source="// lineage 1's kernel\n", lineage=1,
                                   origin=Origin(role="coder", move="rewrite:other"))
    ActorTracker(tracker, owner=1).record(1, 1, other, _ok(other))
    port = ActorTracker(tracker, owner=0, migration=Migration(interval=4), pipelined=True)
    assert [port.migrants(0, step) for step in (0, 1, 2, 3)] == [[]] * 4
    assert [c.id for c, _ in port.migrants(0, 4)] == [other.id]
    ray.get(tracker.close.remote("done"))
    ray.kill(tracker)
