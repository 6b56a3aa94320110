"""A confirmation's secret seeds travel through a pool's lane, the dispatcher and a worker to
``Evaluator.evaluate_on``, on a real Ray instance; candidates sent without them are judged by
``evaluate``. (The sandboxed judge's own use of them: tests/evaluators/test_secret_seeds.py.)"""

from __future__ import annotations

import pytest
import ray

from kernelswarm.cluster import EvalPool
from kernelswarm.search import (
    CHECK_SEEDS,
    Candidate,
    CompileResult,
    Evaluation,
    Evaluator,
    SecretSeeds,
    Status,
)

pytestmark = pytest.mark.slow


def _factories():
    """Evaluators that say which way they were asked (defined inside a function, so Ray ships
    them by value): one that checks on the seeds it is given, one that cannot."""

    class Seeded(Evaluator):
        def compile(self, candidate: Candidate) -> CompileResult:
            return CompileResult(candidate.id, ok=True, seconds=0.0)

        def evaluate(self, candidate: Candidate) -> Evaluation:
            return Evaluation(candidate.id, Status.OK, metrics={CHECK_SEEDS: [0, 1, 2]})

        def evaluate_on(self, candidate: Candidate, seeds: tuple[int, ...]) -> Evaluation:
            return Evaluation(candidate.id, Status.OK, metrics={CHECK_SEEDS: list(seeds)})

    class Unseeded(Seeded):
        evaluate_on = Evaluator.evaluate_on  # the contract's default

    return Seeded, Unseeded


def test_secret_seeds_reach_the_evaluator_through_a_lane(ray_session):
    seeded, unseeded = _factories()
    pool = EvalPool(1, {"num_cpus": 0})
    try:
        lane, plain = pool.open("seeded", seeded), pool.open("unseeded", unseeded)
        kernel = Candidate.create(language="cpp", source="// k", entry="f")
        seeds = SecretSeeds.draw(3)
        assert seeds.checked(ray.get(lane.submit(kernel, seeds.values)))
        assert seeds.checked(lane.evaluate(kernel, seeds.values))  # the path sent again
        assert ray.get(lane.submit(kernel)).metrics[CHECK_SEEDS] == [0, 1, 2]
        # an evaluator that cannot choose its seeds judges as it always does, and says so
        assert not seeds.checked(ray.get(plain.submit(kernel, seeds.values)))
    finally:
        pool.close()
