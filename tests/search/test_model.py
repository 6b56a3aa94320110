"""Candidates, evaluations, the archive and the tracker: the data every result rests on."""

from __future__ import annotations

import math

import pytest

from kernelswarm.search import (
    Candidate,
    Evaluation,
    Origin,
    Record,
    RunInfo,
    ShapeResult,
    Sink,
    Status,
    Tracker,
)
from tests.search.islands_archive import IslandsArchive


def _candidate(source: str = "int f;", lineage: int = 0, **knobs) -> Candidate:
    space = {k: (1, 2, 4, 8) for k in knobs}
    return Candidate.create(language="cpp", source=source, entry="f", knobs=knobs,
                            knob_space=space, lineage=lineage)


def _ok(candidate: Candidate, *speedups: float) -> Evaluation:
    shapes = tuple(ShapeResult(shape=f"n={i}", correct=True, time_us=10 / s, speedup_vs_start=s,
                               speedup_vs_eager=s / 2) for i, s in enumerate(speedups))
    return Evaluation(candidate.id, Status.OK, shapes=shapes)


def test_candidate_id_is_the_content_not_the_history():
    a = _candidate("x", lineage=0, UNROLL=2)
    b = _candidate("x", lineage=3, UNROLL=2).derive(origin=Origin(role="coder"))
    assert a.id == b.id
    assert a.id != _candidate("x", UNROLL=4).id
    assert a.id != _candidate("y", UNROLL=2).id


def test_candidate_rejects_knobs_outside_their_space():
    with pytest.raises(ValueError, match="UNROLL=3"):
        _candidate("x", UNROLL=3)
    with pytest.raises(ValueError, match="not in the knob space"):
        Candidate.create(language="cpp", source="x", entry="f", knobs={"BLOCK": 1})


def test_derive_keeps_knobs_that_still_fit_and_records_the_parent():
    parent = _candidate("x", UNROLL=4)
    child = parent.derive(source="y")
    assert child.knob_values == {"UNROLL": 4}
    assert child.parents == (parent.id,)
    narrowed = parent.derive(knob_space={"UNROLL": (1, 2)})
    assert narrowed.knob_values == {"UNROLL": 1}


def test_speedup_is_the_geometric_mean_and_zero_for_failures():
    c = _candidate()
    assert _ok(c, 2.0, 8.0).speedup == pytest.approx(4.0)
    assert Evaluation(c.id, Status.INCORRECT, "wrong").speedup == 0.0
    broken = Evaluation(c.id, Status.OK, shapes=(ShapeResult("n=1", correct=True),))
    assert broken.speedup == 0.0  # untimed shape (nan speedup) never ranks as a result
    assert math.isnan(broken.shapes[0].time_us)


def test_archive_deduplicates_and_never_loses_the_global_best():
    archive = IslandsArchive(elites=2, island_size=2)
    best = _candidate("best", lineage=0)
    archive.add(best, _ok(best, 5.0))
    for i in range(10):
        c = _candidate(f"k{i}", lineage=i % 3)
        archive.add(c, _ok(c, 1.0 + i / 100))
        archive.add(c, _ok(c, 1.0 + i / 100))
    assert archive.best[0].id == best.id
    assert len(archive.elites) == 2
    assert len({c.id for c, _ in archive.elites}) == 2
    assert all(len(island.members) <= 2 for island in archive.islands.values())
    failed = _candidate("bad", lineage=1)
    archive.add(failed, Evaluation(failed.id, Status.RUNTIME_ERROR, "crash"))
    assert archive.seen(failed.id).status is Status.RUNTIME_ERROR
    assert archive.best[0].id == best.id


class _ListSink(Sink):
    def __init__(self, durable: bool, fail_at: int | None = None) -> None:
        self.durable = durable
        self.fail_at = fail_at
        self.written: list[int] = []
        self.closed = None

    def open(self, run: RunInfo) -> None:
        self.run = run

    def write(self, record: Record) -> None:
        if record.seq == self.fail_at:
            raise OSError("disk full")
        self.written.append(record.seq)

    def close(self, summary) -> None:
        self.closed = summary


def _run_info(tmp_path) -> RunInfo:
    return RunInfo("r1", "test", tmp_path, "silu_and_mul", "cpp", 2)


def test_tracker_writes_durable_sinks_before_acknowledging(tmp_path):
    durable, background = _ListSink(True), _ListSink(False)
    tracker = Tracker(_run_info(tmp_path), [durable, background])
    for i in range(5):
        c = _candidate(f"k{i}", lineage=i % 2)
        record = tracker.record(c.lineage, i, c, _ok(c, 1.0 + i))
        assert durable.written[-1] == record.seq  # already durable when record() returns
    summary = tracker.close("done")
    assert background.written == durable.written == [0, 1, 2, 3, 4]
    assert summary.best[1].speedup == pytest.approx(5.0)
    assert set(summary.lineage_best) == {0, 1}
    assert background.closed is summary


def test_a_failing_sink_is_disabled_and_the_others_keep_every_record(tmp_path):
    durable, flaky = _ListSink(True), _ListSink(False, fail_at=1)
    tracker = Tracker(_run_info(tmp_path), [durable, flaky])
    for i in range(4):
        c = _candidate(f"k{i}")
        tracker.record(0, i, c, _ok(c, 1.0))
    tracker.close("done")
    assert durable.written == [0, 1, 2, 3]
    assert flaky.written == [0]
    assert any("disk full" in e for e in tracker.sink_errors)


def test_tracker_lookup_returns_the_recorded_verdict(tmp_path):
    tracker = Tracker(_run_info(tmp_path), [])
    c = _candidate("k")
    verdict = Evaluation(c.id, Status.TIMEOUT, "slow")
    tracker.record(0, 1, c, verdict)
    assert tracker.lookup(c.id) == verdict
    assert tracker.lookup("nope") is None
    tracker.close("done")


def test_a_claimed_candidate_is_evaluated_once(tmp_path):
    tracker = Tracker(_run_info(tmp_path), [])
    c = _candidate("k")
    assert tracker.claim(c.id) == (None, True)
    assert tracker.claim(c.id) == (None, False)  # someone else is on it: wait, don't evaluate
    verdict = _ok(c, 2.0)
    tracker.record(0, 1, c, verdict)
    assert tracker.claim(c.id) == (verdict, False)
    other = _candidate("k2")
    tracker.claim(other.id)
    tracker.release(other.id)
    assert tracker.claim(other.id) == (None, True)
    tracker.close("done")
