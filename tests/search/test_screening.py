"""Screening in the search layer: which shapes a screen times first, when it drops a candidate,
and what lineages, the driver and the archive do with a screened-out verdict (the judge's side
is tests/evaluators/test_screening_judge.py)."""

from __future__ import annotations

import math

import pytest

from kernelswarm.search import (
    Budget,
    Candidate,
    Driver,
    Evaluation,
    Evaluator,
    KnobTuner,
    Lineage,
    Roles,
    RunInfo,
    Screen,
    ShapeResult,
    Status,
    Tracker,
    Via,
    screened_speedup,
)
from tests.search.test_driver import _Append, _Moves, _Quiet

SHAPES = ("n=1", "n=8", "n=64", "n=512", "n=4096")


def _shape(label: str, speedup: float, ci: float = math.nan, start_us: float = 10.0,
           timed: bool = True) -> ShapeResult:
    return ShapeResult(label, correct=True, time_us=start_us / speedup if timed else math.nan,
                       start_time_us=start_us if timed else math.nan,
                       speedup_vs_start=speedup if timed else math.nan,
                       speedup_vs_start_ci=ci)


def _evaluation(speedups, status=Status.OK, ci=math.nan, cid="c") -> Evaluation:
    return Evaluation(cid, status, shapes=tuple(
        _shape(label, s, ci, start_us=10.0 * 2 ** i) for i, (label, s) in
        enumerate(zip(SHAPES, speedups, strict=True))))


def test_a_screen_spreads_its_shapes_over_the_sizes_and_needs_something_to_save():
    best = _evaluation([1.2, 1.1, 1.3, 1.0, 1.4])
    assert Screen.of(best, 3).shapes == ("n=1", "n=64", "n=4096")  # smallest, middle, largest
    assert Screen.of(best, 1).shapes == ("n=64",)  # the median size
    assert Screen.of(best, 2).shapes == ("n=1", "n=4096")
    assert Screen.of(best, 0) is None and Screen.of(best, 5) is None  # nothing left to save
    assert Screen.of(_evaluation([1.0] * 5, Status.INCORRECT), 1) is None
    untimed = Evaluation("c", Status.OK, shapes=(*best.shapes[:4], _shape("n=4096", 1, timed=False)))
    assert Screen.of(untimed, 1) is None  # no bar on a shape
    with pytest.raises(ValueError, match="among its bar's"):
        Screen(("n=9",), (("n=1", 1.0, math.nan),))


def test_a_candidate_is_dropped_only_when_every_screening_shape_is_beyond_noise_below_the_bar():
    screen = Screen.of(_evaluation([2.0] * 5), 2)  # n=1 and n=4096, bar 2.0 each, no interval
    slow = [_shape("n=1", 1.5), _shape("n=4096", 1.8)]
    assert screen.drops(slow)
    within_margin = [_shape("n=1", 1.5), _shape("n=4096", 1.91)]  # 1.91 x 1.05 >= 2.0
    assert not screen.drops(within_margin)
    noisy = [_shape("n=1", 1.5), _shape("n=4096", 1.8, ci=0.2)]  # its interval reaches 2.0
    assert not screen.drops(noisy)
    wins_one = [_shape("n=1", 2.5), _shape("n=4096", 1.0)]  # a dispatch table may want it
    assert not screen.drops(wins_one)
    assert not screen.drops(slow[:1])  # a screening shape not timed: nothing says slower
    loose_bar = Screen.of(_evaluation([2.0] * 5, ci=0.3), 2)  # the bar's own interval
    assert not loose_bar.drops(slow)
    message = screen.message(slow, 3)
    assert "n=1: 1.500x vs 2.000x" in message and "the other 3 not timed" in message


def test_a_screened_out_verdict_is_no_result_and_a_tuner_hears_it_below_the_best():
    verdict = Evaluation("c", Status.SCREENED_OUT, shapes=(
        _shape("n=1", 2.0), _shape("n=8", 0.5), _shape("n=64", 1, timed=False)))
    assert not verdict.ok and verdict.speedup == 0.0
    best = Evaluation("b", Status.OK, shapes=(
        _shape("n=1", 4.0), _shape("n=8", 1.0), _shape("n=64", 0.25)))
    assert best.speedup == pytest.approx(1.0)
    # half the best's on each timed shape: half of it overall (its own geometric mean there,
    # 1.0, would rank it with the best)
    assert screened_speedup(verdict, best) == pytest.approx(0.5)
    assert screened_speedup(_evaluation([2.0] * 5), best) == 0.0  # not a screened verdict


class Scored(Evaluator):
    """Scores by source on the five shapes: each ``// fast`` line is 1.5x, each ``// slow``
    line 0.5x; screened as the judge screens (the screening shapes first, then ``drops``)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[str, ...] | None]] = []

    def compile(self, candidate):
        from kernelswarm.search import CompileResult

        return CompileResult(candidate.id, ok=True, seconds=0.0)

    def _shapes(self, candidate):
        speedup = 1.5 ** candidate.source.count("// fast") * 0.5 ** candidate.source.count("// slow")
        return [_shape(label, speedup, start_us=10.0 * 2 ** i) for i, label in enumerate(SHAPES)]

    def evaluate(self, candidate):
        self.calls.append((candidate.id, None))
        return Evaluation(candidate.id, Status.OK, shapes=tuple(self._shapes(candidate)))

    def evaluate_screened(self, candidate, screen):
        self.calls.append((candidate.id, screen.shapes))
        shapes = self._shapes(candidate)
        first = [s for s in shapes if s.shape in screen.shapes]
        if screen.drops(first):
            return Evaluation(candidate.id, Status.SCREENED_OUT, screen.message(first, 4),
                              shapes=tuple(s if s.shape in screen.shapes else
                                           _shape(s.shape, 1, timed=False) for s in shapes))
        return Evaluation(candidate.id, Status.OK, shapes=tuple(shapes))


def _kernel(text: str) -> Candidate:
    return Candidate.create(language="cpp", source=f"// start\n{text}", entry="f")


def _tracker(tmp_path) -> Tracker:
    return Tracker(RunInfo("r", "screening", tmp_path, "t", "cpp", 2), sinks=[])


def test_a_verdict_screened_against_one_bar_is_judged_again_for_a_lineage_it_could_beat(tmp_path):
    tracker, judge = _tracker(tmp_path), Scored()
    driver = Driver(tracker, judge)
    candidate = _kernel("// fast\n// slow")  # 0.75x of the start
    high = Screen.of(judge.evaluate(_kernel("// fast")), 1)  # a lineage whose best is 1.5x
    judge.calls.clear()
    screened = driver.judge(candidate, high)
    assert screened.via is Via.EVALUATED and screened.evaluation.status is Status.SCREENED_OUT
    tracker.record(0, 1, candidate, screened.evaluation)
    also_high = driver.judge(candidate, high)  # a lineage it cannot beat either: reused
    assert also_high.via is Via.RECORDED and also_high.evaluation.status is Status.SCREENED_OUT
    low = Screen.of(judge.evaluate(_kernel("// slow")), 1)  # a lineage whose best is 0.5x
    judge.calls.clear()
    again = driver.judge(candidate, low)
    assert again.via is Via.EVALUATED and again.evaluation.ok
    assert judge.calls == [(candidate.id, low.shapes)]
    unscreened = driver.judge(candidate)  # no screen: a screened-out verdict is not a result
    assert unscreened.via is Via.EVALUATED and unscreened.evaluation.ok
    tracker.record(1, 1, candidate, again.evaluation)
    assert tracker.lookup(candidate.id).ok  # the full verdict replaces the screened one
    assert driver.judge(candidate, high).via is Via.RECORDED


def test_a_lineage_screens_against_its_best_repairs_nothing_screened_and_keeps_going(tmp_path):
    judge = Scored()
    start = _kernel("")
    first = _kernel("// fast\n// compile's own kernel")
    lineage = Lineage(0, start, judge.evaluate(start),
                      Roles(_Moves(["rewrite:// slow", "rewrite:// fast", "rewrite:// slow"]),
                            _Append(), _Quiet()),
                      KnobTuner(seed=0), Budget(), first_candidates=[first], screen_shapes=3)
    driver = Driver(_tracker(tmp_path), judge)
    while driver.step(lineage):
        pass
    screens = [shapes for _, shapes in judge.calls[1:]]
    assert screens[0] is None  # the first candidate is judged in full
    assert all(s == ("n=1", "n=64", "n=4096") for s in screens[1:])
    statuses = [a.status for a in lineage.history]
    assert statuses == ["OK", "SCREENED_OUT", "OK", "SCREENED_OUT"]
    assert lineage.best[1].speedup == pytest.approx(2.25)  # fast twice, never a screened one
    assert lineage._failed is None  # a screened-out kernel is slower, not broken


def test_the_summary_counts_each_screened_out_evaluation_once(tmp_path):
    tracker = _tracker(tmp_path)
    candidate = _kernel("// slow")
    screened = Evaluation(candidate.id, Status.SCREENED_OUT, "screened out",
                          shapes=(_shape("n=1", 0.5),), metrics={"screen": {"saved_s": 1.5}})
    tracker.record(0, 1, candidate, screened)
    tracker.record(1, 1, candidate, screened)  # another lineage's step reused the verdict
    summary = tracker.close("done")
    assert summary.screened_out == 1 and summary.screen_saved_s == pytest.approx(1.5)
