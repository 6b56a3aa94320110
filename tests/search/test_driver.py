"""The search driver with in-process ports: claims and the wait for another lineage's verdict
(on a manual clock, no real sleeping), reuse by id and by binary, failed builds, released claims,
worker seconds, and the LocalExecutor that runs it."""

from __future__ import annotations

import hashlib
import threading
import time

import pytest

from kernelswarm.search import (
    STOP,
    Analyst,
    Budget,
    BudgetExpired,
    Candidate,
    Coder,
    CompileResult,
    Driver,
    Evaluation,
    Evaluator,
    Feedback,
    KnobTuner,
    Lineage,
    LocalExecutor,
    Origin,
    Plan,
    Planner,
    Roles,
    RunInfo,
    ShapeResult,
    Status,
    Tracker,
    Via,
)
from kernelswarm.search.driver import STOPPED


class ManualClock:
    """Time moves only when someone sleeps; ``on_sleep`` lets a test act meanwhile."""

    def __init__(self, on_sleep=None) -> None:
        self.now = 100.0
        self.sleeps = 0
        self.on_sleep = on_sleep

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.sleeps += 1
        if self.on_sleep is not None:
            self.on_sleep(self)


class Judge(Evaluator):
    """Scores by source: each ``// fast`` line is 1.5x; ``// broken`` does not build; a
    ``// comment`` line leaves the binary as it was. Counts what it was asked."""

    def __init__(self, eval_s: float = 0.5, fails: bool = False) -> None:
        self.eval_s = eval_s
        self.fails = fails
        self.compiled: list[str] = []
        self.evaluated: list[str] = []

    def compile(self, candidate):
        self.compiled.append(candidate.id)
        if "// broken" in candidate.source:
            return CompileResult(candidate.id, ok=False, seconds=0.1, log="error: broken")
        return CompileResult(candidate.id, ok=True, seconds=0.1, binary=self.binary(candidate))

    @staticmethod
    def binary(candidate):
        code = "\n".join(ln for ln in candidate.source.splitlines()
                         if not ln.startswith("// comment"))
        return hashlib.sha256(code.encode()).hexdigest()

    def evaluate(self, candidate):
        self.evaluated.append(candidate.id)
        if self.fails:
            raise RuntimeError("the sandbox could not start")
        speedup = 1.5 ** candidate.source.count("// fast")
        return Evaluation(candidate.id, Status.OK, eval_s=self.eval_s,
                          binary=self.binary(candidate), shapes=(
            ShapeResult("n=1", correct=True, time_us=10 / speedup, speedup_vs_start=speedup),))


def _tracker(tmp_path) -> Tracker:
    return Tracker(RunInfo("r", "driver", tmp_path, "t", "cpp", 2), sinks=[])


def _kernel(text: str) -> Candidate:
    return Candidate.create(language="cpp", source=f"// start\n{text}", entry="f")


def test_a_candidate_claimed_elsewhere_takes_that_verdict_without_evaluating(tmp_path):
    tracker, judge = _tracker(tmp_path), Judge()
    candidate = _kernel("// fast")
    assert tracker.claim(candidate.id) == (None, True)  # another lineage is evaluating it
    theirs = Evaluation(candidate.id, Status.OK, eval_s=3.0, shapes=(
        ShapeResult("n=1", correct=True, time_us=1.0, speedup_vs_start=2.0),))

    def other_lineage_finishes(clock):
        if clock.sleeps == 8:
            tracker.record(1, 1, candidate, theirs)

    clock = ManualClock(other_lineage_finishes)
    began = time.monotonic()
    judged = Driver(tracker, judge, clock=clock).judge(candidate)
    assert judged.evaluation == theirs and judged.via is Via.WAITED and judged.worker_s == 0.0
    assert judge.compiled == [] and judge.evaluated == []
    assert clock.now == pytest.approx(102.0)  # eight polls of 0.25 s, on the manual clock
    assert time.monotonic() - began < 5.0


def test_a_claim_never_answered_is_evaluated_after_the_wait(tmp_path):
    tracker, judge = _tracker(tmp_path), Judge()
    candidate = _kernel("// fast")
    tracker.claim(candidate.id)  # its lineage died without recording or releasing
    clock = ManualClock()
    judged = Driver(tracker, judge, clock=clock, claim_wait_s=30.0).judge(candidate)
    assert judged.via is Via.EVALUATED and judged.evaluation.speedup == pytest.approx(1.5)
    assert clock.now >= 130.0 and judge.evaluated == [candidate.id]


def test_a_stop_during_the_wait_ends_it(tmp_path):
    tracker, judge = _tracker(tmp_path), Judge()
    candidate = _kernel("")
    tracker.claim(candidate.id)
    stop = threading.Event()
    clock = ManualClock(lambda c: stop.set())
    judged = Driver(tracker, judge, clock=clock, stop=stop).judge(candidate)
    assert clock.sleeps == 1 and judged.via is Via.EVALUATED


def test_reuse_by_id_then_by_binary_and_failed_builds_cost_no_worker_time(tmp_path):
    tracker, judge = _tracker(tmp_path), Judge(eval_s=0.5)
    driver = Driver(tracker, judge, clock=ManualClock())
    first = _kernel("// fast")
    judged = driver.judge(first)
    assert judged.via is Via.EVALUATED and judged.worker_s == 0.5
    tracker.record(0, 1, first, judged.evaluation)

    again = driver.judge(first)
    assert again.via is Via.RECORDED and again.worker_s == 0.0
    same_binary = _kernel("// fast\n// comment: reworded")
    reused = driver.judge(same_binary)
    assert reused.via is Via.SAME_BINARY and reused.worker_s == 0.0
    assert reused.evaluation.candidate_id == same_binary.id
    assert f"same compiled binary as {first.id}" in reused.evaluation.message
    broken = driver.judge(_kernel("// broken"))
    assert broken.via is Via.BUILD_FAILED and broken.worker_s == 0.0
    assert broken.evaluation.status is Status.COMPILE_ERROR and "broken" in broken.evaluation.message
    assert judge.evaluated == [first.id]  # one evaluation in all


def test_a_failed_evaluation_releases_the_claim(tmp_path):
    tracker = _tracker(tmp_path)
    candidate = _kernel("")
    with pytest.raises(RuntimeError, match="sandbox could not start"):
        Driver(tracker, Judge(fails=True), clock=ManualClock()).judge(candidate)
    assert tracker.claim(candidate.id) == (None, True)  # nobody waits for a lost verdict


class _Moves(Planner):
    def __init__(self, moves):
        self.moves = list(moves)

    def plan(self, view):
        return Plan(self.moves.pop(0) if self.moves else STOP, "scripted")


class _Append(Coder):
    def code(self, plan, parent, view):
        return parent.derive(source=parent.source + f"\n{plan.move.split(':', 1)[1]}",
                             origin=Origin(role="coder", move=plan.move))


class _Quiet(Analyst):
    def analyse(self, candidate, evaluation):
        return Feedback(evaluation.status.value)


MOVES = ["rewrite:// fast", "rewrite:// comment: same code", "rewrite:// broken",
         "rewrite:// fast", "rewrite:// fast"]


def _lineages(judge: Judge, budget: Budget, count: int = 2) -> list[Lineage]:
    start = _kernel("")
    start_eval = judge.evaluate(start)
    return [Lineage(i, start, start_eval, Roles(_Moves(MOVES), _Append(), _Quiet()),
                    KnobTuner(seed=i), budget) for i in range(count)]


def test_the_local_executor_records_every_step_and_counts_worker_seconds(tmp_path):
    tracker, judge = _tracker(tmp_path), Judge(eval_s=0.5)
    lineages = _lineages(judge, Budget())
    summary = LocalExecutor(judge, tracker).run(lineages)
    # Both lineages propose the same five kernels: the second takes the first's verdicts.
    records = [(r.lineage, r.step, r.evaluation.status.value) for r in tracker.records]
    assert records == [(lin, step, status) for step, status in
                       enumerate(["OK", "OK", "COMPILE_ERROR", "OK", "OK"], 1) for lin in (0, 1)]
    assert len(judge.evaluated) == 1 + 3  # the start, then "fast", "fast fast", "... fast"
    assert [lin.gpu_s for lin in lineages] == [1.5, 0.0]
    assert summary.reused == 1 and summary.best[1].speedup == pytest.approx(1.5 ** 3)
    assert summary.stop_reason == "planner stopped: scripted"


def test_a_worker_time_budget_reads_only_evaluations(tmp_path):
    tracker, judge = _tracker(tmp_path), Judge(eval_s=0.5)
    (lineage,) = _lineages(judge, Budget(gpu_s=1.0), count=1)
    Driver(tracker, judge).run(lineage)
    # evaluated, same binary (0 s), build failed (0 s), evaluated: 1.0 s spent, then it stops
    assert lineage.evaluated == 4 and lineage.gpu_s == 1.0
    assert lineage.stop_reason.startswith("evaluation-time budget reached")


def test_run_stops_at_the_stop_signal(tmp_path):
    tracker, judge = _tracker(tmp_path), Judge()
    (lineage,) = _lineages(judge, Budget(), count=1)
    stop = threading.Event()
    driver = Driver(tracker, judge, stop=stop)

    seen = []
    original = tracker.record

    def record(*args):
        seen.append(args)
        if len(seen) == 2:
            stop.set()
        return original(*args)

    tracker.record = record
    assert driver.run(lineage) == STOPPED
    assert lineage.step == 2 and len(tracker.records) == 2


class _Expiring(Judge):
    """Judges ``left`` candidates, then says the lineage's time ran out before the next."""

    def __init__(self, left: int) -> None:
        super().__init__()
        self.left = left

    def evaluate(self, candidate):
        if self.left == 0:
            raise BudgetExpired("wall-time budget reached while the candidate waited for an "
                                "evaluation worker; it was not judged")
        self.left -= 1
        return super().evaluate(candidate)


def test_a_candidate_whose_verdict_would_come_after_the_deadline_stops_the_lineage_unrecorded(
        tmp_path):
    tracker, judge = _tracker(tmp_path), _Expiring(left=1)
    (lineage,) = _lineages(Judge(), Budget(), count=1)
    reason = Driver(tracker, judge).run(lineage)
    assert reason.startswith("wall-time budget reached while the candidate waited")
    # judged, same binary, failed build; the fourth expired and left no record
    assert [r.step for r in tracker.records] == [1, 2, 3]
    expired = judge.compiled[-1]
    assert expired not in {r.candidate.id for r in tracker.records}
    assert tracker.claim(expired) == (None, True)  # and no claim that another lineage waits on
