"""The Ray tracker actor with a strategy other than islands and novelty rejection on: a
lineage's port gets the rejection, migrants come from MAP-Elites' cells, and a tracker whose
process is killed comes back holding what it had handed out."""

from __future__ import annotations

import json
import os
import signal
from functools import partial

import pytest
import ray

from kernelswarm.cluster import ActorTracker, TrackerActor
from kernelswarm.cluster.tracker_actor import REJECTIONS_LOG
from kernelswarm.experiments.run.resume import replay_records
from kernelswarm.experiments.sinks import ParquetSink
from kernelswarm.search import (
    Evaluation,
    Migration,
    Origin,
    Population,
    RunInfo,
    ShapeResult,
    Status,
    load_task,
)
from tests.conftest import SILU_TASK

pytestmark = pytest.mark.slow


def _kernel(lineage: int, text: str):
    start = load_task(SILU_TASK).starting_candidate("cpp")
    return start.derive(source=start.source + f"\nstatic int marker_{text};\n", lineage=lineage,
                        origin=Origin(role="coder", move=f"rewrite:{text}"))


def _ok(candidate, shape: str) -> Evaluation:
    return Evaluation(candidate.id, Status.OK, "fine", eval_s=0.1, device="cpu: test", shapes=(
        ShapeResult(shape, correct=True, time_us=8.0, speedup_vs_start=1.25),))


def test_map_elites_and_novelty_through_the_tracker_actor_and_its_restart(tmp_path, ray_session):
    run = RunInfo("strategies", "strategies", tmp_path, "silu_and_mul", "cpp", 2)
    population = Population("map_elites", novelty=0.9, migration=Migration(1, count=1),
                            options={"descriptors": ["shape"]})
    tracker = TrackerActor.remote(run, [ParquetSink()], 4, population=population,
                                  replay=partial(replay_records, tmp_path, SILU_TASK))
    mine = ray.get(tracker.population.remote())
    assert mine.strategy == "map_elites" and mine.novelty == 0.9
    one, other = _kernel(1, "a"), _kernel(1, "b")
    writer = ActorTracker(tracker, owner=1)
    writer.record(1, 1, one, _ok(one, "n=1"))
    writer.record(1, 2, other, _ok(other, "n=4096"))

    port = ActorTracker(tracker, owner=0, migration=mine.migration, novelty=True)
    near = one.derive(source=one.source + "// the same kernel\n", lineage=0,
                      origin=Origin(role="coder", move="rewrite:copy"))
    rejection = port.novel(near)
    assert rejection is not None and rejection.near == one.id
    assert ActorTracker(tracker, owner=0, novelty=False).novel(near) is None  # no round trip
    first = port.migrants(0, 1)
    assert len(first) == 1 and first[0][0].lineage == 1

    pid = ray.get(tracker.__ray_call__.remote(lambda actor: os.getpid()))
    os.kill(pid, signal.SIGKILL)
    # Restarted from the run folder: the same answer for the same step, and the kernel handed
    # out before is not handed out again.
    assert [c.id for c, _ in port.migrants(0, 1)] == [first[0][0].id]
    second = port.migrants(0, 2)
    assert [c.id for c, _ in second] == [({one.id, other.id} - {first[0][0].id}).pop()]
    assert port.migrants(0, 3) == []
    stats = ray.get(tracker.stats.remote())
    assert stats["population"]["strategy"] == "map_elites"
    assert stats["population"]["cells"] == 2
    assert stats["population"]["rejected"] == 1  # read back from the run folder's log
    assert [line["near"] for line in map(json.loads, (tmp_path / REJECTIONS_LOG).read_text()
                                         .splitlines())] == [one.id]
    summary, errors, _ = ray.get(tracker.close.remote("done"))
    ray.kill(tracker)
    assert summary.strategy == "map_elites" and not errors
