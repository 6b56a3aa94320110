"""RulePlanner on hand-built lineage views of the real silu_and_mul kernel."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kernelswarm.agents import RuleCoder, RulePlanner
from kernelswarm.search import (
    ADOPT,
    STOP,
    TUNE,
    Attempt,
    Candidate,
    Evaluation,
    Facts,
    Feedback,
    LineageView,
    Plan,
    ShapeResult,
    Status,
)

CODER = RuleCoder()


def _ok(candidate: Candidate, speedup: float) -> Evaluation:
    return Evaluation(candidate.id, Status.OK, shapes=(
        ShapeResult("n=1", correct=True, time_us=1.0, speedup_vs_start=speedup),))


def _view(current: Candidate, history: tuple[Attempt, ...] = (), best_speedup: float = 1.0,
          global_best: tuple[Candidate, Evaluation] | None = None,
          facts: Facts | None = None) -> LineageView:
    return LineageView(lineage=0, step=len(history), current=current,
                       best=(current, _ok(current, best_speedup)), global_best=global_best,
                       history=history, feedback=Feedback("", facts or Facts()))


def _rewrite(move: str, parent: Candidate) -> Candidate:
    child = CODER.code(Plan(move), parent, _view(parent))
    assert child is not None, move
    return child


def _attempt(step: int, move: str, candidate: Candidate | None, status: str,
             speedup: float = 0.0) -> Attempt:
    return Attempt(step, move, candidate.id if candidate else "", status, speedup)


def _applicable(candidate: Candidate) -> list[str]:
    order = RulePlanner(0).order(candidate.language)
    return [t.name for t in order if t.apply(candidate.source, candidate.space) is not None]


def test_the_same_seed_and_history_give_the_same_plans(start):
    unrolled = _rewrite("rewrite:unroll", start)
    history = (_attempt(1, "rewrite:unroll", unrolled, "OK", 1.1),
               _attempt(2, TUNE, unrolled.derive(knobs={"KS_UNROLL": 8}), "OK", 1.05))
    for seed in range(6):
        for view in (_view(start), _view(unrolled, history, 1.1)):
            assert RulePlanner(seed).plan(view) == RulePlanner(seed).plan(view)


def test_different_seeds_lead_with_different_rewrites(start):
    firsts = [RulePlanner(seed).plan(_view(start)).move for seed in range(4)]
    assert all(move.startswith("rewrite:") for move in firsts)
    assert len(set(firsts)) == min(4, len(_applicable(start)))


@pytest.mark.parametrize("status", ["NO_CHANGE", "COMPILE_ERROR", "INCORRECT"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_failed_rewrite_is_never_proposed_again_and_the_planner_stops_when_all_failed(
        start, seed, status):
    planner, history, moves = RulePlanner(seed), [], []
    for step in range(1, 20):
        plan = planner.plan(_view(start, tuple(history)))
        assert plan.rationale
        if plan.move == STOP:
            break
        assert plan.move.startswith("rewrite:") and plan.move not in moves
        moves.append(plan.move)
        child = None if status == "NO_CHANGE" else _rewrite(plan.move, start)
        history.append(_attempt(step, plan.move, child, status))
    assert plan.move == STOP
    assert sorted(moves) == sorted(f"rewrite:{n}" for n in _applicable(start))
    assert "no knobs" in plan.rationale


def test_a_failure_is_remembered_after_tuning_changes_the_kernel(start):
    unrolled = _rewrite("rewrite:unroll", start)
    tuned = unrolled.derive(knobs={"KS_UNROLL": 8})
    broken = _rewrite("rewrite:fast_exp", unrolled)
    history = (_attempt(1, "rewrite:unroll", unrolled, "OK", 1.1),
               _attempt(2, "rewrite:fast_exp", broken, "INCORRECT"),
               _attempt(3, TUNE, tuned, "OK", 1.2))
    for seed in range(6):
        assert RulePlanner(seed).plan(_view(tuned, history, 1.2)).move != "rewrite:fast_exp"


def test_adopt_when_the_global_best_is_clearly_better(start):
    other = _rewrite("rewrite:fast_exp", start)
    assert RulePlanner(0).plan(_view(start, global_best=(other, _ok(other, 1.5)))).move == ADOPT
    no_best = LineageView(0, 0, start, None, (other, _ok(other, 1.5)), (), None)
    assert RulePlanner(0).plan(no_best).move == ADOPT
    assert RulePlanner(0).plan(_view(start, global_best=(other, _ok(other, 1.01)))).move != ADOPT
    assert RulePlanner(0).plan(_view(start, global_best=(start, _ok(start, 1.5)))).move != ADOPT


def test_a_new_knob_gets_a_tuning_trial_before_the_next_rewrite(start):
    unrolled = _rewrite("rewrite:unroll", start)
    history = (_attempt(1, "rewrite:unroll", unrolled, "OK", 1.1),)
    for seed in range(4):
        plan = RulePlanner(seed).plan(_view(unrolled, history, 1.1))
        assert plan.move == TUNE and "KS_UNROLL" in plan.rationale
    history += (_attempt(2, TUNE, unrolled.derive(knobs={"KS_UNROLL": 8}), "OK", 1.0),)
    assert RulePlanner(0).plan(_view(unrolled, history, 1.1)).move.startswith("rewrite:")


def _fully_rewritten(start: Candidate) -> tuple[Candidate, list[Attempt]]:
    kernel, history = start, []
    for name in _applicable(start):
        kernel = _rewrite(f"rewrite:{name}", kernel)
        history.append(_attempt(len(history) + 1, f"rewrite:{name}", kernel, "OK", 1.0 + len(history)))
    return kernel, history


def test_once_rewrites_are_exhausted_knobs_are_tuned_until_every_setting_was_tried(start):
    kernel, history = _fully_rewritten(start)
    planner = RulePlanner(0)
    assert kernel.knob_values["KS_UNROLL"] == 4
    for value in (1, 2, 8):
        plan = planner.plan(_view(kernel, tuple(history)))
        assert plan.move == TUNE, plan
        history.append(_attempt(len(history) + 1, TUNE, kernel.derive(knobs={"KS_UNROLL": value}),
                                "OK", 1.0))
    plan = planner.plan(_view(kernel, tuple(history)))
    assert plan.move == STOP and "all 4 knob settings were tried" in plan.rationale


def test_tuning_stops_after_repeated_failed_settings(start):
    kernel, history = _fully_rewritten(start)
    for value in (2, 8):
        history.append(_attempt(len(history) + 1, TUNE, kernel.derive(knobs={"KS_UNROLL": value}),
                                "INCORRECT"))
    plan = RulePlanner(0).plan(_view(kernel, tuple(history)))
    assert plan.move == STOP and "failed" in plan.rationale


def test_stop_spending_once_the_kernel_is_near_the_roofline(start):
    at_roofline = Facts(status=Status.OK, candidate_id=start.id, roofline_fraction=0.95)
    assert RulePlanner(0).plan(_view(start, facts=at_roofline)).move == STOP
    far = replace(at_roofline, roofline_fraction=0.3)
    assert RulePlanner(0).plan(_view(start, facts=far)).move != STOP
    someone_else = replace(at_roofline, candidate_id="0123456789abcdef")
    assert RulePlanner(0).plan(_view(start, facts=someone_else)).move != STOP


def test_the_rationale_reports_the_last_failure_in_words(start):
    facts = Facts(candidate_id="0123456789abcdef", status=Status.INCORRECT, move="rewrite:simd",
                  failed_shape="d=4096,dtype=float32,tokens=1")
    plan = RulePlanner(0).plan(_view(start, facts=facts))
    assert "rewrite:simd failed (INCORRECT on d=4096,dtype=float32,tokens=1)" in plan.rationale
    assert "Next untried rewrite" in plan.rationale


def test_a_rewrite_that_was_not_faster_gets_one_more_try_after_fresh_ones(start):
    restricted = _rewrite("rewrite:restrict", start)
    fast = _rewrite("rewrite:fast_exp", start)
    history = [_attempt(1, "rewrite:restrict", restricted, "OK", 1.0),
               _attempt(2, "rewrite:fast_exp", fast, "OK", 1.7)]
    planner, moves = RulePlanner(0), []
    while (plan := planner.plan(_view(fast, tuple(history), 1.7))).move != STOP:
        assert plan.move.startswith("rewrite:") and plan.move not in moves
        moves.append(plan.move)
        child = _rewrite(plan.move, fast)  # each is correct but not faster: fast stays current
        history.append(_attempt(len(history) + 1, plan.move, child, "OK", 1.6))
    assert moves[-1] == "rewrite:restrict"
    assert "earlier version of this kernel" in planner.plan(
        _view(fast, tuple(history[:2 + len(moves) - 1]), 1.7)).rationale
    assert sorted(moves) == sorted(f"rewrite:{n}" for n in _applicable(fast))


def test_a_language_without_rewrites_is_only_tuned_then_stopped():
    plain = Candidate.create(language="cuda", source="// k", entry="k")
    plan = RulePlanner(0).plan(_view(plain))
    assert plan.move == STOP and "no rewrite in the library applies" in plan.rationale
    knobbed = Candidate.create(language="cuda", source="// k", entry="k",
                               knob_space={"BLOCK": (128, 256)})
    assert RulePlanner(0).plan(_view(knobbed)).move == TUNE


def test_a_repeating_tuner_does_not_hold_up_the_rewrites(start):
    unrolled = _rewrite("rewrite:unroll", start)
    history = (_attempt(1, "rewrite:unroll", unrolled, "OK", 1.1),
               _attempt(1, TUNE, None, "NO_CHANGE"))
    assert RulePlanner(0).plan(_view(unrolled, history, 1.1)).move.startswith("rewrite:")


# --- cuda: stages and the profile ---------------------------------------------------------------

def _cuda_start() -> Candidate:
    from kernelswarm.search import load_task
    from tests.conftest import ROOT

    start = load_task(ROOT / "experiments" / "tasks" / "silu_and_mul", "cuda").starting_candidate("cuda")
    return start.derive(knob_space={})  # no knobs: the first plan is a rewrite, not a tuning trial


def _profiled(candidate: Candidate, large: float, small: float, registers: int = 32,
              behind: tuple[str, ...] = ()) -> Facts:
    return Facts(status=Status.OK, candidate_id=candidate.id, large_roofline_fraction=large,
                 small_roofline_fraction=small, registers=registers, spill_bytes=0,
                 behind_compile=behind)


def _names(facts: Facts) -> list[str]:
    return [t.name for t in RulePlanner(0).order("cuda", facts)]


def test_memory_rewrites_come_before_compute_ones_until_the_large_shapes_near_the_roof():
    start = _cuda_start()
    for seed in range(4):
        order = RulePlanner(seed).order("cuda")
        stages = [t.stage for t in order]
        assert stages == sorted(stages, key=["memory", "compute"].index)
    done = [t.stage for t in RulePlanner(0).order("cuda", _profiled(start, 0.85, 0.5))]
    assert done == sorted(done, key=["compute", "memory"].index)


def test_small_shapes_far_from_the_roof_put_geometry_first_and_large_ones_vectorize():
    start = _cuda_start()
    assert _names(_profiled(start, 0.6, 0.01))[0] in {"split_rows", "rows_per_block"}
    assert _names(_profiled(start, 0.6, 0.5, behind=("tokens=1",)))[0] in {
        "split_rows", "rows_per_block"}
    assert _names(_profiled(start, 0.6, 0.5))[0] == "vectorize"
    plan = RulePlanner(0).plan(_view(start, facts=_profiled(start, 0.6, 0.01)))
    assert plan.move == "rewrite:split_rows"


def test_register_pressure_puts_rewrites_that_add_work_per_thread_last():
    start = _cuda_start()
    order = _names(_profiled(start, 0.6, 0.5, registers=200))
    assert set(order[-2:]) == {"vectorize", "unroll"}


def test_the_profile_of_the_best_is_used_when_the_feedback_is_about_another_kernel():
    start = _cuda_start()
    evaluation = Evaluation(start.id, Status.OK, shapes=(
        ShapeResult("tokens=1", correct=True, time_us=20.0, speedup_vs_start=1.0,
                    roofline_fraction=0.001),
        ShapeResult("tokens=4096", correct=True, time_us=170.0, speedup_vs_start=1.0,
                    roofline_fraction=0.7)))
    view = LineageView(0, 1, start, (start, evaluation), None, (),
                       Feedback("", Facts(candidate_id="another", status=Status.INCORRECT)))
    assert RulePlanner(1).plan(view).move == "rewrite:split_rows"


def test_a_large_knob_space_is_tuned_up_to_the_trial_limit_then_stopped():
    wide = Candidate.create(language="cuda", source="// k", entry="k",
                            knob_space={"BLOCK": (64, 128, 256, 512, 1024), "VEC": (1, 2, 4, 8)})
    planner, history = RulePlanner(0, tune_trials=9), []
    settings = [{"BLOCK": b, "VEC": v} for b in (64, 128, 256, 512, 1024) for v in (1, 2, 4, 8)]
    for setting in settings:
        plan = planner.plan(_view(wide, tuple(history)))
        if plan.move != TUNE:
            break
        history.append(_attempt(len(history) + 1, TUNE, wide.derive(knobs=setting), "OK", 1.0))
    assert len(history) == 9  # past the old fixed six, up to the limit, with settings left
    assert plan.move == STOP and "9 tuning trials" in plan.rationale
