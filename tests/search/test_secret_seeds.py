"""The confirmation's secret seeds: drawn apart from the search's, and recorded with it."""

from __future__ import annotations

import pytest

from kernelswarm.search import (
    CHECK_SEEDS,
    Candidate,
    Confirmation,
    Confirmed,
    Evaluation,
    SecretSeeds,
    ShapeResult,
    Status,
    choose,
)


def _evaluation(candidate: Candidate, speedup: float, seeds=None, status=Status.OK) -> Evaluation:
    metrics = {} if seeds is None else {CHECK_SEEDS: list(seeds)}
    return Evaluation(candidate.id, status, "" if status is Status.OK else "wrong result",
                      shapes=(ShapeResult("n=1", correct=True, time_us=10.0 / speedup,
                                          speedup_vs_start=speedup),), metrics=metrics)


def test_secret_seeds_are_distinct_fresh_and_never_a_searched_seed():
    draws = [SecretSeeds.draw(3) for _ in range(20)]
    for seeds in draws:
        assert len(set(seeds.values)) == 3
        # above 0 .. seeds - 1 and the judge's refill seed (7919), whatever evaluator.seeds is
        assert all(1 << 32 <= s < 1 << 62 for s in seeds.values)
    assert len({d.values for d in draws}) == 20  # from the OS's entropy, not a fixed stream
    with pytest.raises(ValueError, match="at least one secret seed"):
        SecretSeeds.draw(0)


def test_an_evaluation_counts_as_checked_only_on_exactly_the_seeds():
    seeds = SecretSeeds((1 << 40, 1 << 41))
    kernel = Candidate.create(language="cpp", source="// a", entry="f")
    assert seeds.checked(_evaluation(kernel, 2.0, seeds.values))
    assert not seeds.checked(_evaluation(kernel, 2.0, (0, 1)))  # the search's own
    assert not seeds.checked(_evaluation(kernel, 2.0, seeds.values[:1]))
    assert not seeds.checked(_evaluation(kernel, 2.0))  # an evaluator that records none


def test_a_kernel_wrong_on_the_secret_seeds_is_out_and_the_record_says_why():
    seeds = SecretSeeds.draw(2)
    cheat = Candidate.create(language="cpp", source="// cheat", entry="f")
    honest = Candidate.create(language="cpp", source="// honest", entry="f")
    wrong = _evaluation(cheat, 3.0, seeds.values, Status.INCORRECT)
    kernels = (Confirmed(cheat, _evaluation(cheat, 3.0, (0, 1)),
                         (wrong, _evaluation(cheat, 3.0, seeds.values))),
               Confirmed(honest, _evaluation(honest, 1.5, (0, 1)),
                         (_evaluation(honest, 1.4, seeds.values),
                          _evaluation(honest, 1.6, seeds.values))))
    chosen = choose(kernels)
    assert chosen is not None and chosen.candidate == honest  # the next one, not the fastest
    doc = Confirmation(2, kernels, chosen, 1.0, seeds=seeds).as_dict()
    assert doc["secret_seeds"] == list(seeds.values)
    assert doc["chosen"] == honest.id
    by_id = {k["candidate_id"]: k for k in doc["kernels"]}
    assert by_id[cheat.id]["failure"].startswith("INCORRECT")
    assert by_id[honest.id]["on_secret_seeds"] is True
    # a confirmation without seeds (not run) records none
    assert Confirmation(0, (), None, 0.0, "interrupted").as_dict()["secret_seeds"] is None
