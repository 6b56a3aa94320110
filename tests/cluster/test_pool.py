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
from kernelswarm.search import Candidate, CompileResult, Evaluation, Evaluator, Status

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
