"""Cheating Triton kernels (run by the interpreter in the sandbox), each caught with its status.

Most are refused by the static screen already; ``screen_off`` evaluates them with the screen
switched off in this process, to show that the runner's checks and the judge catch them as well.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kernelswarm.search import Candidate, Status, load_task
from tests.evaluators.kernel_library import KERNELS


@pytest.fixture(scope="module")
def triton_start(tiny_silu_task) -> Candidate:
    return load_task(tiny_silu_task).starting_candidate("triton")


@pytest.fixture(scope="module")
def triton_variant(triton_start) -> Callable[[str], Candidate]:
    def make(name: str) -> Candidate:
        return triton_start.derive(source=(KERNELS / f"triton_{name}.py").read_text())

    return make


@pytest.fixture
def screen_off(triton_evaluator, monkeypatch):
    """The session's triton evaluator with the static screen switched off."""
    monkeypatch.setattr(triton_evaluator.language, "screen_rules", ())
    return triton_evaluator


def test_a_launcher_that_computes_with_pytorch_is_rejected(triton_evaluator, triton_variant):
    evaluation = triton_evaluator.evaluate(triton_variant("computes_with_torch"))
    assert evaluation.status is Status.REJECTED
    assert "calls PyTorch compute (aten::sigmoid at line 8 of the kernel" in evaluation.message
    assert "aten::mul" in evaluation.message
    assert "shape d=256,dtype=float32,tokens=1" in evaluation.message


def test_a_kernel_that_writes_only_on_its_first_call_is_incorrect(triton_evaluator,
                                                                  triton_variant):
    evaluation = triton_evaluator.evaluate(triton_variant("writes_only_first_call"))
    assert evaluation.status is Status.INCORRECT
    assert "non-deterministic" in evaluation.message


def test_a_result_cached_by_input_pointer_is_incorrect(triton_evaluator, triton_variant):
    evaluation = triton_evaluator.evaluate(triton_variant("pointer_cache"))
    assert evaluation.status is Status.INCORRECT
    assert "stale result" in evaluation.message
    assert "same input buffers were refilled with new values" in evaluation.message


@pytest.mark.parametrize("name, rule, line", [
    ("host_thread", "imports", 3),
    ("side_stream", "streams, events and graphs", 20),
    ("slows_the_clock", "imports", 3),
    ("patches_torch", "attribute assignment", 24),
    ("rebinds_output", "attribute assignment", 22),
    ("returns_subclass", "classes", 8),
])
def test_the_screen_refuses_threads_streams_timers_patches_and_fake_outputs(
        triton_evaluator, triton_variant, name, rule, line):
    evaluation = triton_evaluator.evaluate(triton_variant(name))
    assert evaluation.status is Status.REJECTED
    assert f"static screen: line {line} uses {rule}" in evaluation.message


def test_rebinding_an_output_is_rejected_by_the_sandbox(screen_off, triton_variant):
    evaluation = screen_off.evaluate(triton_variant("rebinds_output"))
    assert evaluation.status is Status.REJECTED
    assert "the kernel rebound output 0 to other storage" in evaluation.message


def test_returning_a_tensor_subclass_is_rejected_by_the_sandbox(screen_off, triton_variant):
    evaluation = screen_off.evaluate(triton_variant("returns_subclass"))
    assert evaluation.status is Status.REJECTED
    assert "returned a LazyResult that is not one of its outputs" in evaluation.message


def test_replacing_the_clock_is_rejected_and_the_sandbox_replaced(screen_off, triton_variant,
                                                                  triton_start):
    evaluation = screen_off.evaluate(triton_variant("slows_the_clock"))
    assert evaluation.status is Status.REJECTED
    assert "replaced time.perf_counter_ns" in evaluation.message
    # the next candidate gets a fresh runner: the patched clock died with this one
    assert screen_off.evaluate(triton_start).status is Status.OK


def test_patching_pytorch_in_the_runner_is_rejected_and_never_outlives_it(
        screen_off, triton_variant, triton_start):
    evaluation = screen_off.evaluate(triton_variant("patches_torch"))
    assert evaluation.status is Status.REJECTED
    assert "replaced torch.Tensor.isnan in the runner's process" in evaluation.message
    assert screen_off.evaluate(triton_start).status is Status.OK


def test_times_forged_inside_the_runner_disagree_with_the_judges_clock(screen_off,
                                                                      triton_variant,
                                                                      triton_start):
    evaluation = screen_off.evaluate(triton_variant("forges_its_times"))
    assert evaluation.status is Status.REJECTED, evaluation.message
    assert "reported times disagree with the batch's wall time" in evaluation.message
    # the rewritten sampling code died with its runner
    honest = screen_off.evaluate(triton_start)
    assert honest.status is Status.OK, honest.message
    assert 0.5 < honest.speedup < 2.0
