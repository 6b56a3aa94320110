"""The lineage state machine, driven with scripted roles so each rule is observable."""

from __future__ import annotations

import pytest

from kernelswarm.search import (
    ADOPT,
    STOP,
    TUNE,
    Analyst,
    Budget,
    Candidate,
    Coder,
    Evaluation,
    Feedback,
    KnobTuner,
    Lineage,
    Origin,
    Plan,
    Planner,
    Roles,
    ShapeResult,
    Status,
)


class _Script(Planner):
    def __init__(self, moves):
        self.moves = list(moves)
        self.views = []

    def plan(self, view):
        self.views.append(view)
        return Plan(self.moves.pop(0) if self.moves else STOP, "scripted")


class _AppendCoder(Coder):
    """Appends the move name as a comment: a new source per move, None for 'rewrite:noop'."""

    def code(self, plan, parent, view):
        if plan.move == "rewrite:noop":
            return None
        return parent.derive(source=parent.source + f"\n// {plan.move}",
                             origin=Origin(role="coder", move=plan.move))


class _Analyst(Analyst):
    def analyse(self, candidate, evaluation):
        return Feedback(f"{evaluation.status.value} {evaluation.speedup:.2f}")


def _ok(candidate: Candidate, speedup: float) -> Evaluation:
    return Evaluation(candidate.id, Status.OK, shapes=(
        ShapeResult("n=1", correct=True, time_us=1.0, speedup_vs_start=speedup),))


def _start() -> tuple[Candidate, Evaluation]:
    start = Candidate.create(language="cpp", source="// start", entry="f",
                             knob_space={"UNROLL": (1, 2, 4, 8)})
    return start, _ok(start, 1.0)


def _lineage(moves, budget=None, seed=0):
    budget = budget or Budget(candidates=10)
    start, start_eval = _start()
    planner = _Script(moves)
    roles = Roles(planner, _AppendCoder(), _Analyst())
    return Lineage(0, start, start_eval, roles, KnobTuner(seed=seed), budget), planner


def test_an_improvement_becomes_the_kernel_the_next_move_builds_on():
    lineage, _ = _lineage(["rewrite:a", "rewrite:b"])
    first = lineage.propose()
    lineage.observe(first, _ok(first, 1.5))
    second = lineage.propose()
    assert second.parents == (first.id,)
    lineage.observe(second, Evaluation(second.id, Status.INCORRECT, "wrong on n=1"))
    assert lineage.best[0].id == first.id and lineage.current.id == first.id
    assert [a.status for a in lineage.history] == ["OK", "INCORRECT"]
    assert lineage.since_improvement == 1


def test_tune_asks_optuna_for_knob_values_within_the_space():
    lineage, _ = _lineage([TUNE] * 6)
    seen = set()
    while (candidate := lineage.propose()) is not None:
        assert candidate.knob_values["UNROLL"] in (1, 2, 4, 8)
        assert candidate.origin.role == "tuner"
        seen.add(candidate.knob_values["UNROLL"])
        lineage.observe(candidate, _ok(candidate, candidate.knob_values["UNROLL"] / 2))
    # duplicates are skipped, so every evaluated setting is new
    assert len(seen) == lineage.evaluated
    assert lineage.tuner.trials(next(iter(lineage.tuner._studies))) >= lineage.evaluated


def test_moves_that_change_nothing_are_recorded_and_the_lineage_stops_after_too_many():
    lineage, _ = _lineage(["rewrite:noop"] * 20)
    assert lineage.propose() is None
    assert "no new candidate" in lineage.stop_reason
    assert all(a.status == "NO_CHANGE" for a in lineage.history)


def test_adopt_switches_to_the_global_best():
    lineage, planner = _lineage([ADOPT, "rewrite:x"])
    other = Candidate.create(language="cpp", source="// elsewhere", entry="f", lineage=3)
    candidate = lineage.propose(global_best=(other, _ok(other, 3.0)))
    assert candidate.parents == (other.id,)
    assert lineage.best_speedup == pytest.approx(3.0)


def test_budget_and_planner_stop_reasons_are_reported():
    lineage, _ = _lineage(["rewrite:a", "rewrite:b", "rewrite:c"], budget=Budget(candidates=2))
    for _ in range(2):
        c = lineage.propose()
        lineage.observe(c, _ok(c, 1.0))
    assert lineage.propose() is None
    assert lineage.stop_reason == "candidate budget reached (2)"
    stopped, _ = _lineage([])
    assert stopped.propose() is None and stopped.stop_reason.startswith("planner stopped")


def test_target_speedup_stops_the_lineage():
    lineage, _ = _lineage(["rewrite:a", "rewrite:b"], budget=Budget(target_speedup=1.2))
    c = lineage.propose()
    lineage.observe(c, _ok(c, 1.3))
    assert lineage.propose() is None
    assert "target speedup reached" in lineage.stop_reason


def test_the_same_seed_and_verdicts_reproduce_the_same_candidates():
    def trace(seed):
        lineage, _ = _lineage([TUNE] * 5, seed=seed)
        ids = []
        while (c := lineage.propose()) is not None:
            ids.append(c.id)
            lineage.observe(c, _ok(c, 1.0 + c.knob_values["UNROLL"] / 10))
        return ids

    assert trace(7) == trace(7)


def test_the_tuner_never_repeats_a_setting_and_reports_exhaustion():
    tuner = KnobTuner(seed=3)
    space = {"UNROLL": (1, 2, 4, 8), "VEC": (1, 2)}
    seen = []
    while (asked := tuner.ask("fam", space)) is not None:
        number, knobs = asked
        seen.append(tuple(sorted(knobs.items())))
        tuner.tell("fam", number, float(knobs["UNROLL"] * knobs["VEC"]))
    assert len(seen) == len(set(seen)) == 8
