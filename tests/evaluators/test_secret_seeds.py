"""``SandboxEvaluator.evaluate_on``: a candidate checked on seeds it is given (a confirmation's
secret ones) instead of the fixed 0 .. seeds - 1, with the real judge and runner.

A kernel right only on the fixed seeds' inputs is caught by the timed recheck when it is wrong
on a tuning shape (timed inputs are secret already), but not when it is wrong only on a
held-out shape, which is never timed: there only new seeds find it."""

from __future__ import annotations

import pytest

from kernelswarm.search import CHECK_SEEDS, SecretSeeds, Status, load_task
from tests.conftest import SILU_TASK
from tests.evaluators.fixed_seed_kernels import fixed_seed_kernel


@pytest.fixture(scope="module")
def task():
    return load_task(SILU_TASK, "cpu")


def _kernel(start, task, seeds: int, shapes):
    return start.derive(source=fixed_seed_kernel(task, seeds, shapes))


def test_a_kernel_right_only_on_the_fixed_seeds_of_held_out_shapes_fails_on_secret_seeds(
        evaluator, start, task):
    seeds = evaluator.settings.seeds
    cheat = _kernel(start, task, seeds, task.heldout_shapes)
    searched = evaluator.evaluate(cheat)
    # the search's own evaluation cannot tell: every check is on a memorised input, and the
    # timed (secret) inputs are all on tuning shapes, where it is right
    assert searched.status is Status.OK, searched.message
    assert searched.metrics[CHECK_SEEDS] == list(range(seeds))

    secret = SecretSeeds.draw(seeds)
    confirmed = evaluator.evaluate_on(cheat, secret.values)
    assert confirmed.status is Status.INCORRECT, confirmed.message
    assert "held-out shape" in confirmed.message
    assert any(f"seed {s}" in confirmed.message for s in secret.values), confirmed.message
    assert confirmed.metrics[CHECK_SEEDS] == list(secret.values)
    assert secret.checked(confirmed) and not secret.checked(searched)


def test_a_kernel_right_only_on_the_fixed_seeds_everywhere_fails_the_search_already(
        evaluator, start, task):
    # wrong on any unseen input of every shape: the copies re-checked after timing were
    # drawn from the evaluation's own secret, so the search's evaluation rejects it
    cheat = _kernel(start, task, evaluator.settings.seeds,
                    (*task.tuning_shapes, *task.heldout_shapes))
    searched = evaluator.evaluate(cheat)
    assert searched.status is Status.INCORRECT, searched.message
    assert "during timing" in searched.message


def test_secret_seeds_pass_a_correct_kernel_and_reuse_their_references(evaluator, start):
    secret = SecretSeeds.draw(evaluator.settings.seeds)
    first = evaluator.evaluate_on(start, secret.values)
    assert first.status is Status.OK, first.message
    assert f"x {len(secret.values)} secret seeds" in first.message
    again = evaluator.evaluate_on(start, secret.values)
    assert again.status is Status.OK, again.message
    # each (shape, seed)'s inputs and reference were computed by the first evaluation only
    assert again.metrics["references"]["misses"] == first.metrics["references"]["misses"]
    assert again.metrics["references"]["hits"] > first.metrics["references"]["hits"]


@pytest.mark.parametrize("seeds", [(), (5, 5), (1, 2, 3, 4, 5, 6, 7), (-1,), (True,)])
def test_evaluate_on_refuses_seeds_it_cannot_check(offline_evaluator, start, seeds):
    with pytest.raises(ValueError, match="evaluate_on: seeds must be"):
        offline_evaluator.evaluate_on(start, seeds)
