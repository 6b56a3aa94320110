"""A tester's extra checks: shapes and value scales beyond the task's, run by the evaluator."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator
from kernelswarm.search import Status
from tests.conftest import SILU_TASK
from tests.evaluators.kernel_library import quick_settings

LARGE = {"shape": {"tokens": 3, "d": 37, "dtype": "float32"}, "scale": 1000.0,
         "reason": "large magnitudes"}


@pytest.fixture(scope="module")
def checking_evaluator(compile_cache: Path):
    ev = SandboxEvaluator(SILU_TASK, "cpp", quick_settings(compile_cache, extra_checks=(LARGE,)))
    yield ev
    ev.close()


def test_a_kernel_wrong_only_on_large_inputs_fails_the_scaled_check(checking_evaluator,
                                                                     variant, start):
    assert checking_evaluator.evaluate(start).status is Status.OK
    evaluation = checking_evaluator.evaluate(variant("overflows_large_inputs"))
    assert evaluation.status is Status.INCORRECT
    assert "extra check d=37,dtype=float32,tokens=3 with inputs scaled by 1000" in \
        evaluation.message
    # the task's own shapes passed before the extra check failed
    assert [s.correct for s in evaluation.shapes] == [True, True, True, False]


def test_without_the_check_the_same_kernel_passes(evaluator, variant):
    evaluation = evaluator.evaluate(variant("overflows_large_inputs"))
    assert evaluation.status is Status.OK, evaluation.message
    assert "0 extra checks" in evaluation.message


@pytest.mark.parametrize("check", [{"shape": {}}, {"shape": {"d": 3}, "scale": 0},
                                   {"scale": 2.0}, "d=3"])
def test_a_malformed_check_is_refused_naming_the_setting(check, tmp_path):
    with pytest.raises(ValueError, match="extra_checks"):
        EvaluatorSettings(cache_dir=tmp_path, extra_checks=(check,))


def test_a_check_the_starting_kernel_cannot_pass_is_dropped_and_said_so(compile_cache, start):
    impossible = {"shape": {"tokens": 2, "d": -5, "dtype": "float32"}, "reason": "negative"}
    ev = SandboxEvaluator(SILU_TASK, "cpp",
                          quick_settings(compile_cache, extra_checks=(impossible, LARGE)))
    try:
        evaluation = ev.evaluate(start)
    finally:
        ev.close()
    assert evaluation.status is Status.OK, evaluation.message
    assert "1 extra checks" in evaluation.message
    dropped = evaluation.dropped_checks
    assert list(dropped) == ["d=-5,dtype=float32,tokens=2"]
    assert "the task cannot run it" in dropped["d=-5,dtype=float32,tokens=2"]
