"""RuleCoder: one candidate per applicable rewrite move, None for everything else."""

from __future__ import annotations

import pytest

from kernelswarm.agents import RuleCoder, transformations_for
from kernelswarm.agents.builtin.cpp_rewrites import TARGET_FEATURES, host_cpu_flags
from kernelswarm.search import ADOPT, STOP, TUNE, Candidate, LineageView, Plan

NAMES = [t.name for t in transformations_for("cpp")]


def _view(candidate):
    return LineageView(lineage=3, step=0, current=candidate, best=None, global_best=None,
                       history=(), feedback=None)


@pytest.mark.parametrize("name", NAMES)
def test_a_rewrite_move_yields_a_child_with_the_transformation_applied(name, start):
    if name == "target_isa" and not set(TARGET_FEATURES) <= host_cpu_flags():
        pytest.skip("this CPU lacks AVX2/FMA")
    plan = Plan(f"rewrite:{name}", f"because {name} should help")
    child = RuleCoder().code(plan, start, _view(start))
    assert child is not None
    expected_source, expected_space = transformations_for("cpp")[NAMES.index(name)].apply(
        start.source, start.space)
    assert child.source == expected_source and child.space == expected_space
    assert child.parents == (start.id,)
    assert child.entry == start.entry and child.language == "cpp"
    assert child.spec == start.spec  # the calling contract travels with the kernel
    assert (child.origin.role, child.origin.move, child.origin.rationale) == (
        "coder", plan.move, plan.rationale)


def test_a_new_knob_starts_at_a_setting_that_exercises_the_rewrite(start):
    unrolled = RuleCoder().code(Plan("rewrite:unroll"), start, _view(start))
    assert unrolled.space == {"KS_UNROLL": (1, 2, 4, 8)}
    assert unrolled.knob_values == {"KS_UNROLL": 4}  # at 1 it would compile as its parent


def test_knobs_the_parent_has_keep_their_values(start):
    unrolled = RuleCoder().code(Plan("rewrite:unroll"), start, _view(start))
    tuned = unrolled.derive(knobs={"KS_UNROLL": 2})
    child = RuleCoder().code(Plan("rewrite:fast_exp"), tuned, _view(tuned))
    assert child.knob_values == {"KS_UNROLL": 2}


@pytest.mark.parametrize("move", ["rewrite:no_such_rewrite", "rewrite:", TUNE, ADOPT, STOP,
                                  "restrict"])
def test_moves_that_name_no_transformation_give_none(move, start):
    assert RuleCoder().code(Plan(move), start, _view(start)) is None


def test_a_rewrite_already_applied_gives_none(start):
    coder = RuleCoder()
    child = coder.code(Plan("rewrite:fast_exp"), start, _view(start))
    assert coder.code(Plan("rewrite:fast_exp"), child, _view(child)) is None


def test_a_language_without_that_transformation_gives_none(start):
    cuda = Candidate.create(language="cuda", source=start.source, entry=start.entry)
    assert RuleCoder().code(Plan("rewrite:fast_exp"), cuda, _view(cuda)) is None
