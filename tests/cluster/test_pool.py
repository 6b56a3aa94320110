"""One pool of evaluation workers shared by two cells, on a real Ray instance: the dispatcher
takes the cells in turns and holds a capped cell to its share.

The evaluator here only stamps when it ran (the sandbox's own behaviour is tested in
tests/evaluators/): what is under test is the order and overlap the dispatcher produces.
"""

from __future__ import annotations

import time

import pytest
import ray

from kernelswarm.cluster import EvalPool
from kernelswarm.search import (
    BudgetExpired,
    Candidate,
    CompileResult,
    Evaluation,
    Evaluator,
    Status,
)

pytestmark = pytest.mark.slow

SERVICE_S = 0.5


def _stamping_factory():
    """A factory of evaluators that take SERVICE_S and say when they started and ended
    (defined inside a function, so Ray ships it by value to the workers)."""

    class Stamping(Evaluator):
        def compile(self, candidate: Candidate) -> CompileResult:
            return CompileResult(candidate.id, ok=True, seconds=0.0)

        def evaluate(self, candidate: Candidate) -> Evaluation:
            began = time.time()
            time.sleep(SERVICE_S)
            return Evaluation(candidate.id, Status.OK, metrics={"began": began,
                                                                "ended": time.time()})

    def stamping() -> Evaluator:
        return Stamping()

    return stamping


def _candidates(prefix: str, n: int) -> list[Candidate]:
    return [Candidate.create(language="cpp", source=f"// {prefix} {i}", entry="f")
            for i in range(n)]


def test_a_cell_with_many_candidates_does_not_starve_another(ray_session):
    pool = EvalPool(1, {"num_cpus": 0})
    try:
        make = _stamping_factory()
        big, small = pool.open("big", make), pool.open("small", make)
        pending = [("big", big.submit(c)) for c in _candidates("big", 6)]
        time.sleep(0.2)  # every candidate of the big cell is queued before the small cell's
        pending += [("small", small.submit(c)) for c in _candidates("small", 2)]
        done = sorted((ray.get(ref).metrics["began"], cell) for cell, ref in pending)
        order = [cell for _, cell in done]
        # First come first served would run the small cell's two last (7th and 8th).
        assert order[:4] == ["big", "small", "big", "small"], order
        assert pool.utilisation("small")["cell_evaluations"] == 2
    finally:
        pool.close()


def test_a_candidate_still_waiting_for_a_worker_at_its_deadline_is_not_judged(ray_session):
    pool = EvalPool(1, {"num_cpus": 0})
    try:
        lane = pool.open("cell", _stamping_factory())
        first, late, after = _candidates("queue", 3)
        running = lane.submit(first)  # holds the only worker for SERVICE_S
        time.sleep(0.1)
        asked = time.time()
        with pytest.raises(BudgetExpired, match="waited for an evaluation worker"):
            lane.evaluate(late, not_after=asked + 0.1)
        assert time.time() - asked < SERVICE_S  # given up at the deadline, not after the queue
        assert ray.get(running).ok
        # the worker it waited for went on to the next candidate: nothing held it
        assert lane.evaluate(after, not_after=time.time() + 30).ok
        assert pool.utilisation("cell")["cell_evaluations"] == 2
    finally:
        pool.close()


def test_a_capped_cell_holds_one_worker_while_the_other_gets_the_rest(ray_session):
    pool = EvalPool(2, {"num_cpus": 0})
    try:
        make = _stamping_factory()
        capped = pool.open("capped", make, max_workers=1)
        other = pool.open("other", make)
        capped_refs = [capped.submit(c) for c in _candidates("capped", 4)]
        other_refs = [other.submit(c) for c in _candidates("other", 4)]
        spans = sorted((e.metrics["began"], e.metrics["ended"])
                       for e in ray.get(capped_refs))
        # The capped cell's evaluations never overlap: one worker at a time.
        assert all(spans[i][1] <= spans[i + 1][0] for i in range(len(spans) - 1)), spans
        assert all(e.ok for e in ray.get(other_refs))
    finally:
        pool.close()


PREPARE_S = 1.0


def _preparing_factory():
    """Evaluators whose ``prepare`` takes PREPARE_S (a calibration read back, a sandbox
    started) and whose ``evaluate`` does it first when it was not done, as the judge's."""

    class Preparing(Evaluator):
        def __init__(self) -> None:
            self.ready = False

        def prepare(self) -> dict[str, str]:
            if not self.ready:
                time.sleep(PREPARE_S)
                self.ready = True
            return {"calibration": "read from the cache"}

        def compile(self, candidate: Candidate) -> CompileResult:
            return CompileResult(candidate.id, ok=True, seconds=0.0)

        def evaluate(self, candidate: Candidate) -> Evaluation:
            built = not self.ready
            self.prepare()
            began = time.time()
            time.sleep(0.1)
            return Evaluation(candidate.id, Status.OK, metrics={
                "began": began, "built_here": built, "calibration": "read from the cache"})

    def preparing() -> Evaluator:
        return Preparing()

    return preparing


def test_an_idle_worker_gets_ready_for_a_cell_before_its_first_candidate(ray_session):
    from kernelswarm.cluster.activity import summarise_activity

    pool = EvalPool(2, {"num_cpus": 0})
    try:
        # Opening the cell sets an idle worker preparing; the first candidate goes to the
        # other, which has to get ready itself.
        lane = pool.open("cell", _preparing_factory())
        first = ray.get(lane.submit(_candidates("first", 1)[0]))
        assert first.metrics["built_here"]
        time.sleep(0.5)
        both = ray.get([lane.submit(c) for c in _candidates("next", 2)])
        # Both workers judged at once, and neither had to get ready first.
        assert abs(both[0].metrics["began"] - both[1].metrics["began"]) < 0.5
        assert not any(e.metrics["built_here"] for e in both)
        activity = pool.activity()
        prepared = [i for i in activity["intervals"] if i["kind"] == "prepare"]
        assert len(prepared) == 1 and prepared[0]["outcome"] == "ok", activity["intervals"]
        assert prepared[0]["ended"] - prepared[0]["began"] >= PREPARE_S
        assert len({p["pid"] for p in activity["workers"]}) == 2
        summary = summarise_activity(activity)
        assert summary["evaluations"] == 3 and summary["preparations"] == 1
        assert summary["calibrations"] == {"measured": 0, "read": 2}  # each worker built one
        assert 0 < summary["busy"] <= 1 and summary["shared_gpus"] == []
    finally:
        pool.close()


def test_a_worker_that_fails_to_get_ready_still_judges_and_says_why(ray_session):
    class Failing(Evaluator):
        def prepare(self) -> dict[str, str]:
            raise RuntimeError("no sandbox today")

        def compile(self, candidate: Candidate) -> CompileResult:
            return CompileResult(candidate.id, ok=True, seconds=0.0)

        def evaluate(self, candidate: Candidate) -> Evaluation:
            return Evaluation(candidate.id, Status.OK)

    def failing() -> Evaluator:
        return Failing()

    pool = EvalPool(2, {"num_cpus": 0})
    try:
        lane = pool.open("cell", failing)
        assert ray.get(lane.submit(_candidates("a", 1)[0])).ok
        time.sleep(1.0)
        results = ray.get([lane.submit(c) for c in _candidates("b", 4)])
        assert all(e.ok for e in results)
        prepared = [i for i in pool.activity()["intervals"] if i["kind"] == "prepare"]
        assert [i["outcome"] for i in prepared] == ["failed: RayTaskError(RuntimeError)"]
    finally:
        pool.close()


def test_a_task_whose_start_fails_is_calibrated_once_and_every_candidate_gets_its_verdict(
        tmp_path, ray_session):
    """The worker that prepares the cell finds the start failing; the candidates then get that
    verdict at once, as itself (no Ray traceback in its message), and nothing calibrates again:
    a start that hangs would cost the runner's whole start-up limit each time."""
    from kernelswarm.search import StartingKernelFailed

    calibrations = tmp_path / "calibrations"

    class BrokenStart(Evaluator):
        def _calibrate(self) -> None:
            with open(calibrations, "a") as log:
                log.write("calibrated\n")
            raise StartingKernelFailed(Evaluation("start", Status.RUNTIME_ERROR, "SIGSEGV"))

        def prepare(self) -> dict[str, str]:
            self._calibrate()
            return {}

        def compile(self, candidate: Candidate) -> CompileResult:
            return CompileResult(candidate.id, ok=True, seconds=0.0)

        def evaluate(self, candidate: Candidate) -> Evaluation:
            self._calibrate()
            return Evaluation(candidate.id, Status.OK)

    def broken() -> Evaluator:
        return BrokenStart()

    pool = EvalPool(1, {"num_cpus": 0})
    try:
        lane = pool.open("cell", broken)
        for candidate in _candidates("c", 2):
            with pytest.raises(StartingKernelFailed) as raised:
                lane.evaluate(candidate)
            assert type(raised.value) is StartingKernelFailed
            assert str(raised.value) == ("the starting kernel fails evaluation "
                                         "(RUNTIME_ERROR): SIGSEGV")
            assert raised.value.evaluation.status is Status.RUNTIME_ERROR
        assert calibrations.read_text() == "calibrated\n"
    finally:
        pool.close()
