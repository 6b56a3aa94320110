"""The lineage state machine, driven with scripted roles so each rule is observable."""

from __future__ import annotations

import pytest

from kernelswarm.search import (
    ADOPT,
    COMPUTE,
    CORRECTNESS,
    MEMORY,
    REPAIR,
    STOP,
    TUNE,
    Analyst,
    Budget,
    Candidate,
    Coder,
    Evaluation,
    Facts,
    Feedback,
    KnobTuner,
    Lineage,
    Origin,
    Plan,
    Planner,
    Roles,
    ShapeResult,
    Status,
    Usage,
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


def test_adopt_switches_to_the_best_migrant_received():
    lineage, planner = _lineage([ADOPT, "rewrite:x"])
    other = Candidate.create(language="cpp", source="// elsewhere", entry="f", lineage=3)
    weaker = Candidate.create(language="cpp", source="// weaker", entry="f", lineage=2)
    lineage.receive([(other, _ok(other, 3.0)), (weaker, _ok(weaker, 2.0))])
    candidate = lineage.propose()
    assert planner.views[0].global_best[0].id == other.id
    assert [c.id for c, _ in planner.views[0].migrants] == [other.id, weaker.id]
    assert candidate.parents == (other.id,)
    assert lineage.best_speedup == pytest.approx(3.0)


def test_adopt_without_migrants_changes_nothing():
    lineage, _ = _lineage([ADOPT, "rewrite:x"])
    candidate = lineage.propose()
    assert candidate.parents == (_start()[0].id,)
    assert lineage.history[0].status == "NO_CHANGE"


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


class _RepairingCoder(_AppendCoder):
    """Fixes a failed candidate by appending "// fixed N"; can be told to give up."""

    def __init__(self, gives_up=False):
        self.gives_up = gives_up
        self.seen = []

    def repair(self, failed, evaluation, view):
        self.seen.append((failed.id, evaluation.message, view.failed[0].id))
        if self.gives_up:
            return None
        return failed.derive(source=failed.source + f"\n// fixed {len(self.seen)}",
                             origin=Origin(role="coder", move=REPAIR))


def _repairing(moves, max_repairs=2, gives_up=False):
    start, start_eval = _start()
    planner, coder = _Script(moves), _RepairingCoder(gives_up)
    roles = Roles(planner, coder, _Analyst())
    return Lineage(0, start, start_eval, roles, KnobTuner(seed=0), Budget(candidates=10),
                   max_repairs=max_repairs), planner, coder


def test_a_failed_coder_candidate_goes_back_to_the_coder_with_its_verdict():
    lineage, planner, coder = _repairing(["rewrite:a", "rewrite:b"])
    broken = lineage.propose()
    lineage.observe(broken, Evaluation(broken.id, Status.COMPILE_ERROR, "error: expected ';'"))
    fixed = lineage.propose()
    assert coder.seen == [(broken.id, "error: expected ';'", broken.id)]
    assert fixed.parents == (broken.id,) and len(planner.views) == 1  # no new plan
    lineage.observe(fixed, _ok(fixed, 1.4))
    assert lineage.history[-1].move == REPAIR and lineage.best[0].id == fixed.id
    after = lineage.propose()
    assert after.origin.move == "rewrite:b" and len(coder.seen) == 1


def test_repairs_stop_at_the_limit_and_the_wrong_shape_is_in_the_history():
    lineage, planner, coder = _repairing(["rewrite:a", "rewrite:b"], max_repairs=2)
    candidate = lineage.propose()
    for _ in range(3):  # the original and two repairs, all wrong
        lineage.observe(candidate, Evaluation(candidate.id, Status.INCORRECT, "wrong", shapes=(
            ShapeResult("n=1", correct=True), ShapeResult("n=7", correct=False))))
        candidate = lineage.propose()
    assert len(coder.seen) == 2
    assert [a.failed_shape for a in lineage.history] == ["n=7"] * 3
    assert candidate.origin.move == "rewrite:b"  # the planner took over


def test_a_coder_that_cannot_repair_hands_back_to_the_planner():
    lineage, planner, coder = _repairing(["rewrite:a", "rewrite:b"], gives_up=True)
    broken = lineage.propose()
    lineage.observe(broken, Evaluation(broken.id, Status.RUNTIME_ERROR, "SIGSEGV"))
    assert lineage.propose().origin.move == "rewrite:b" and len(coder.seen) == 1


def test_tuned_candidates_that_fail_are_not_repaired():
    lineage, planner, coder = _repairing([TUNE, "rewrite:b"])
    tuned = lineage.propose()
    lineage.observe(tuned, Evaluation(tuned.id, Status.INCORRECT, "wrong"))
    assert lineage.propose().origin.move == "rewrite:b" and coder.seen == []


class _FactsAnalyst(Analyst):
    def analyse(self, candidate, evaluation):
        return Feedback("", Facts(candidate_id=candidate.id, status=evaluation.status,
                                  roofline_fraction=float(candidate.source.count("+")) / 10,
                                  bound="compute" if "compute" in candidate.source else "memory"))


def test_stages_go_from_correctness_to_memory_to_compute():
    start = Candidate.create(language="cpp", source="// start", entry="f")
    roles = Roles(_Script(["rewrite:a"] * 5), _AppendCoder(), _FactsAnalyst())
    broken = Lineage(0, start, Evaluation(start.id, Status.INCORRECT), roles,
                     KnobTuner(seed=0), Budget())
    assert broken.stage == CORRECTNESS
    lineage = Lineage(0, start, _ok(start, 1.0), roles, KnobTuner(seed=0), Budget())
    assert lineage.stage == MEMORY and lineage.view().stage == MEMORY
    near = start.derive(source="// ++++++++++")  # 100% of the roofline by the analyst's facts
    lineage.observe(near, _ok(near, 1.5))
    assert lineage.stage == COMPUTE
    slower = start.derive(source="// compute")  # a worse kernel does not move the stage
    lineage.observe(slower, _ok(slower, 1.1))
    assert lineage.stage == COMPUTE


@pytest.mark.parametrize("budget, spend, reason", [
    (Budget(gpu_s=5.0), dict(eval_s=3.0), "evaluation-time budget reached (6.0 s of 5 s"),
    (Budget(patience=2), dict(speedup=0.5), "no improvement in 2 steps"),
])
def test_gpu_time_and_patience_budgets_stop_a_lineage(budget, spend, reason):
    lineage, _ = _lineage(["rewrite:a", "rewrite:b", "rewrite:c"], budget=budget)
    for _ in range(2):
        c = lineage.propose()
        evaluation = _ok(c, spend.get("speedup", 2.0 + lineage.step))
        lineage.observe(c, Evaluation(c.id, Status.OK, shapes=evaluation.shapes,
                                      eval_s=spend.get("eval_s", 0.1)))
    assert lineage.propose() is None
    assert lineage.stop_reason.startswith(reason)


def test_a_reused_verdict_costs_no_worker_time():
    lineage, _ = _lineage(["rewrite:a"])
    c = lineage.propose()
    lineage.observe(c, Evaluation(c.id, Status.OK, shapes=_ok(c, 1.2).shapes, eval_s=4.0),
                    worker_s=0.0)
    assert lineage.gpu_s == 0.0 and lineage.spent().candidates == 1


class _PaidScript(_Script):
    """A planner that reports what each plan cost, as a model-backed one does."""

    def usage(self):
        return Usage(calls=len(self.views), prompt_tokens=900 * len(self.views),
                     completion_tokens=100 * len(self.views), cost_usd=0.01 * len(self.views))


@pytest.mark.parametrize("budget, reason", [
    (Budget(tokens=2500), "token budget reached (3,000 of 2,500 tokens)"),
    (Budget(cost_usd=0.02), "money budget reached ($0.0200 of $0.02)"),
])
def test_token_and_money_budgets_read_the_roles_usage(budget, reason):
    start, start_eval = _start()
    roles = Roles(_PaidScript(["rewrite:a", "rewrite:b", "rewrite:c", "rewrite:d"]),
                  _AppendCoder(), _Analyst())
    lineage = Lineage(0, start, start_eval, roles, KnobTuner(seed=0), budget)
    proposed = 0
    while (c := lineage.propose()) is not None:
        proposed += 1
        lineage.observe(c, _ok(c, 1.0))
    assert lineage.stop_reason == reason
    assert proposed == (3 if budget.tokens else 2)
