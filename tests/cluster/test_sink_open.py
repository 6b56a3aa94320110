"""A background sink (MLflow) opens beside the tracker without holding up the tracker's start:
a new MLflow store takes seconds to create, and the starting kernel's evaluation and every
lineage waited for it. A sink that cannot be opened is reported; the run goes on."""

from __future__ import annotations

import os
import time

import pytest
import ray

from kernelswarm.cluster import TrackerActor
from kernelswarm.search import Candidate, Evaluation, RunInfo, Sink, Status

pytestmark = pytest.mark.slow


def _sinks(marks=None):
    """A sink slow to open, one that cannot be opened and one that notes the niceness it was
    opened at in ``marks`` (defined inside a function, so Ray ships them by value)."""

    class SlowToOpen(Sink):
        def open(self, run: RunInfo) -> None:
            time.sleep(120)

        def write(self, record) -> None: ...

        def close(self, summary) -> None: ...

    class CannotOpen(Sink):
        def open(self, run: RunInfo) -> None:
            raise OSError("the store is read-only")

        def write(self, record) -> None: ...

        def close(self, summary) -> None: ...

    class Noting(Sink):
        def open(self, run: RunInfo) -> None:
            (marks / str(os.getpriority(os.PRIO_PROCESS, 0))).touch()

        def write(self, record) -> None: ...

        def close(self, summary) -> None: ...

    return SlowToOpen(), CannotOpen(), Noting()


def _run(tmp_path) -> RunInfo:
    return RunInfo("r", "t", tmp_path, "silu_and_mul", "cpp", 1)


def test_the_tracker_answers_while_a_background_sink_is_still_opening(tmp_path, ray_session):
    slow, _, _ = _sinks()
    tracker = TrackerActor.remote(_run(tmp_path), [slow], 4)
    try:
        stats = ray.get(tracker.stats.remote(), timeout=60)  # the sink takes 120 s to open
        assert stats["records"] == 0
    finally:
        ray.kill(tracker)


def test_a_background_sink_that_cannot_open_is_reported_and_records_go_on(tmp_path,
                                                                          ray_session):
    _, broken, _ = _sinks()
    tracker = TrackerActor.remote(_run(tmp_path), [broken], 4)
    try:
        start = Candidate.create(language="cpp", source="// start", entry="f")
        ray.get(tracker.record.remote(-1, 0, start, Evaluation(start.id, Status.OK, "")),
                timeout=120)
        summary, errors, _ = ray.get(tracker.close.remote("done"), timeout=120)
        assert summary.records == 1
        assert any("could not be opened" in e and "the store is read-only" in e
                   for e in errors), errors
    finally:
        ray.kill(tracker)


@ray.remote
def _niceness() -> int:
    return os.getpriority(os.PRIO_PROCESS, 0)


def test_mlflow_is_written_at_a_lower_priority_than_the_actors_the_run_waits_for(tmp_path,
                                                                               ray_session):
    from kernelswarm.cluster.sink_actor import SINK_NICENESS

    marks = tmp_path / "marks"
    marks.mkdir()
    *_, noting = _sinks(marks)
    tracker = TrackerActor.remote(_run(tmp_path), [noting], 4)
    try:
        ray.get(tracker.close.remote("done"), timeout=120)  # waits for the sink's opening
        worker = ray.get(_niceness.remote())
        assert [int(m.name) for m in marks.iterdir()] == [min(19, worker + SINK_NICENESS)]
    finally:
        ray.kill(tracker)
