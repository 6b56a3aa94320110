"""Knobs per shape (a start generated from torch.compile: a version per shape, each with knobs
of its own): the dispatch move reads each shape's best values off candidates that changed every
shape's knobs at once, and sets them, in the same source."""

from __future__ import annotations

import math

import pytest

from kernelswarm.agents.builtin.dispatch_move import DISPATCH, dispatch_candidate
from kernelswarm.search import Candidate, Evaluation, ShapeResult, Status
from kernelswarm.search.dispatch import read_shape_knobs, shape_knob_line

LABELS = ["d=11008,dtype=bfloat16,tokens=1", "d=13824,dtype=bfloat16,tokens=16",
          "d=14336,dtype=bfloat16,tokens=4096"]
SUFFIXES = {label: f"_S{i}" for i, label in enumerate(LABELS)}
SOURCE = f"""# Generated for three shapes
# {shape_knob_line(SUFFIXES)}
def silu_and_mul(out, x, tokens, d, XBLOCK_S0=0, XBLOCK_S1=0, XBLOCK_S2=0, **other_knobs):
    pass
"""
VALUES = (0, 128, 256, 512, 1024)
# Per shape, the speedup each of its own XBLOCK values gives: each shape has another best, and
# a shape's time does not depend on the other shapes' knobs.
GAINS = [{0: 1.0, 128: 1.3, 256: 1.2, 512: 1.0, 1024: 0.9},
         {0: 1.0, 128: 1.0, 256: 1.25, 512: 1.1, 1024: 1.0},
         {0: 1.0, 128: 0.7, 256: 0.9, 512: 1.0, 1024: 1.05}]
BEST = (1.3 * 1.25 * 1.05) ** (1 / 3)


def judge(candidate: Candidate) -> Evaluation:
    knobs = candidate.knob_values
    shapes = tuple(ShapeResult(label, correct=True, time_us=10.0 / GAINS[i][knobs[f"XBLOCK_S{i}"]],
                               speedup_vs_start=GAINS[i][knobs[f"XBLOCK_S{i}"]])
                   for i, label in enumerate(LABELS))
    return Evaluation(candidate.id, Status.OK, shapes=shapes)


@pytest.fixture
def generated() -> Candidate:
    return Candidate.create(language="triton", source=SOURCE, entry="silu_and_mul",
                            knob_space={f"XBLOCK_S{i}": VALUES for i in range(3)})


def test_the_source_names_each_shapes_knobs() -> None:
    assert read_shape_knobs(SOURCE) == SUFFIXES
    assert read_shape_knobs("def f(): pass\n") == {}
    assert read_shape_knobs("# kernelswarm shape knobs: {not json\n") == {}


@pytest.mark.parametrize("seed", [0, 1])
def test_a_lineage_tunes_every_shape_at_once_then_sets_each_to_its_best(generated, seed):
    from kernelswarm.agents import builtin_roles
    from kernelswarm.search import Budget, KnobTuner, Lineage

    # each shape's best is read off the trials as they come: far fewer candidates than it takes
    # tuning alone to draw every shape's best at once (22-24 with these seeds)
    lineage = Lineage(0, generated, judge(generated), builtin_roles(seed), KnobTuner(seed),
                      Budget(candidates=16))
    while (candidate := lineage.propose()) is not None:
        lineage.observe(candidate, judge(candidate))
    moves = [a.move for a in lineage.history]
    assert DISPATCH in moves, moves
    best, evaluation = lineage.best
    assert best.source == SOURCE  # the same kernel, its knobs set per shape
    tuned = sum(1 for m in moves if m == "tune")
    # each shape at its best: more than any single candidate of the tuning reached, unless a
    # trial drew every shape's best at once
    assert evaluation.speedup == pytest.approx(BEST), (best.knob_values, tuned)


def test_no_move_when_fewer_than_two_candidates_were_measured_on_every_shape(generated):
    from kernelswarm.search import Attempt, Feedback, LineageView

    evaluation = judge(generated)
    view = LineageView(lineage=0, step=1, current=generated, best=(generated, evaluation),
                       global_best=None, history=(Attempt(
                           1, "tune", generated.id, "OK", evaluation.speedup,
                           shape_speedups=tuple((s.shape, s.speedup_vs_start)
                                                for s in evaluation.shapes),
                           knobs=generated.knobs),), feedback=Feedback(""))
    assert dispatch_candidate(view) is None
    assert math.isclose(evaluation.speedup, 1.0)


def _plain_start() -> Candidate:
    return Candidate.create(language="triton", source="def silu_and_mul(out, x, tokens, d):\n"
                            "    pass\n", entry="silu_and_mul")


def _judged_with_start(candidate: Candidate, first_gain: float) -> Evaluation:
    """The task's plain kernel at 1.0 on every shape; the generated one scaled by
    ``first_gain`` (its knobs at 0 are compile's choice: ``first_gain`` against the plain one)."""
    if candidate.source != SOURCE:
        shapes = tuple(ShapeResult(label, correct=True, time_us=10.0, speedup_vs_start=1.0)
                       for label in LABELS)
        return Evaluation(candidate.id, Status.OK, shapes=shapes)
    judged = judge(candidate)
    return Evaluation(candidate.id, Status.OK, shapes=tuple(
        ShapeResult(s.shape, correct=True, time_us=s.time_us / first_gain,
                    speedup_vs_start=s.speedup_vs_start * first_gain) for s in judged.shapes))


@pytest.mark.parametrize(("first_gain", "goes_on"), [(0.99, True), (0.9, False)])
def test_a_first_candidate_within_the_margin_is_the_kernel_the_lineage_goes_on_from(
        generated, first_gain, goes_on):
    from kernelswarm.agents import builtin_roles
    from kernelswarm.search import Budget, KnobTuner, Lineage

    start = _plain_start()
    lineage = Lineage(0, start, _judged_with_start(start, first_gain), builtin_roles(0),
                      KnobTuner(0), Budget(candidates=40), first_candidates=(generated,))
    first = lineage.propose()
    assert first is not None and first.id == generated.id and first.lineage == 0
    lineage.observe(first, _judged_with_start(first, first_gain))
    assert (lineage.current.id == generated.id) is goes_on
    if goes_on:  # its per-shape knobs are then tuned, and each shape set to its best
        while (candidate := lineage.propose()) is not None:
            lineage.observe(candidate, _judged_with_start(candidate, first_gain))
        assert lineage.best[0].source == SOURCE
        assert lineage.best[1].speedup == pytest.approx(BEST * first_gain)
