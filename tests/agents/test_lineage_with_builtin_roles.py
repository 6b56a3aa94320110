"""The built-in roles driving the real lineage state machine, judged by a stand-in evaluator that
scores a candidate by what its source contains (no compiling: the rules are what is tested)."""

from __future__ import annotations

import pytest

from kernelswarm.agents import builtin_roles
from kernelswarm.search import (
    REWRITE,
    TUNE,
    Budget,
    Candidate,
    Evaluation,
    KnobTuner,
    Lineage,
    ShapeResult,
    Status,
)

UNROLL_GAIN = {1: 1.0, 2: 1.03, 4: 1.05, 8: 1.1}


def judge(candidate: Candidate) -> Evaluation:
    """fast_exp 1.7x, target_isa 2x on top, unroll by its knob; simd breaks this kernel."""
    if "#pragma GCC ivdep" in candidate.source:
        return Evaluation(candidate.id, Status.INCORRECT, "output differs",
                          shapes=(ShapeResult("n=1", max_abs_err=1.0, correct=False),))
    speedup = 1.0
    if "ks_fast_expf(-g)" in candidate.source:
        speedup *= 1.7
        speedup *= 2.0 if "#pragma GCC target" in candidate.source else 1.0
    speedup *= UNROLL_GAIN[candidate.knob_values.get("KS_UNROLL", 1)]
    return Evaluation(candidate.id, Status.OK, shapes=(
        ShapeResult("n=1", correct=True, time_us=10.0 / speedup, speedup_vs_start=speedup,
                    roofline_fraction=0.1 * speedup),))


def run(start: Candidate, seed: int) -> tuple[Lineage, list[Candidate]]:
    lineage = Lineage(0, start, judge(start), builtin_roles(seed), KnobTuner(seed),
                      Budget(candidates=60))
    proposed = []
    while (candidate := lineage.propose()) is not None:
        proposed.append(candidate)
        lineage.observe(candidate, judge(candidate))
    return lineage, proposed


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_a_lineage_finds_the_gains_tunes_and_stops_by_itself(start, seed):
    lineage, proposed = run(start, seed)
    assert lineage.stop_reason.startswith("planner stopped"), lineage.stop_reason
    best, _ = lineage.best
    assert "ks_fast_expf(-g)" in best.source
    # unroll is first evaluated at factor 4; the tuner finds the best factor, 8
    assert best.knob_values.get("KS_UNROLL") == 8
    assert lineage.best_speedup >= 1.7 * 1.1
    moves = [a.move for a in lineage.history]
    assert TUNE in moves
    # The planner checks that a rewrite applies before asking for it: only the tuner's repeats
    # of settings already evaluated come back with nothing new.
    assert all(a.move == TUNE for a in lineage.history if a.status == "NO_CHANGE")
    assert len(proposed) <= 20


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_no_rewrite_is_tried_twice_on_the_same_source(start, seed):
    _, proposed = run(start, seed)
    sources = {start.id: start.source} | {c.id: c.source for c in proposed}
    tried = [(c.origin.move, sources[c.parents[0]]) for c in proposed
             if c.origin.move.startswith(REWRITE)]
    assert len(tried) == len(set(tried))
