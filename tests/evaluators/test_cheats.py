"""Cheating cpp kernels, each caught with its status (the protocol in docs/architecture.md).

Kept elsewhere: a kernel that modifies its input (test_verdicts), one right only on power-of-two
widths (held-out shapes, test_verdicts), one that starts a thread (screen, test_build); Triton's
in test_cheats_triton, the GPU's in test_cheats_gpu.
"""

from __future__ import annotations

import math

from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator
from kernelswarm.evaluators.judge.figures import ROOFLINE_MARGIN, roofline_verdict
from kernelswarm.search import ShapeResult, Status
from tests.conftest import SILU_TASK
from tests.evaluators.kernel_library import KERNELS, quick_settings


def test_a_kernel_that_writes_only_on_its_first_call_is_incorrect(evaluator, variant):
    evaluation = evaluator.evaluate(variant("writes_only_first_call"))
    assert evaluation.status is Status.INCORRECT
    assert "non-deterministic" in evaluation.message  # the second call left the -Inf poison


def test_a_result_cached_by_input_pointer_is_incorrect(evaluator, variant):
    evaluation = evaluator.evaluate(variant("pointer_cache"))
    assert evaluation.status is Status.INCORRECT
    assert "stale result" in evaluation.message
    assert "same input buffers were refilled with new values" in evaluation.message
    assert "may not cache results between calls" in evaluation.message


def test_timed_calls_never_repeat_their_inputs_so_remembering_them_does_not_pay(evaluator,
                                                                                variant):
    # This kernel skips the work once the same buffer comes back four times with the same first
    # value: timed inputs are refreshed with new values before every sample, so it never can.
    evaluation = evaluator.evaluate(variant("early_return_when_timed"))
    assert evaluation.status is Status.OK, evaluation.message


def test_a_kernel_that_stops_working_after_many_calls_fails_during_timing(evaluator, variant):
    evaluation = evaluator.evaluate(variant("stops_after_many_calls"))
    assert evaluation.status is Status.INCORRECT, evaluation.message
    assert "wrong result of a timed call on shape" in evaluation.message
    assert "during timing" in evaluation.message and "did not write them" in evaluation.message


def _timed(time_us: float, roofline_fraction: float) -> ShapeResult:
    return ShapeResult(shape="tokens=1", correct=True, time_us=time_us, start_time_us=10.0,
                       roofline_fraction=roofline_fraction)


def test_a_speedup_beyond_the_roofline_is_rejected_not_reported():
    beyond = (_timed(10.0, 0.9), _timed(1.0, ROOFLINE_MARGIN * 2))
    status, message = roofline_verdict(beyond, True, "correct")
    assert status is Status.REJECTED
    assert "faster than the machine allows" in message and "3.00x the roofline" in message
    assert roofline_verdict(beyond[:1], True, "correct") == (Status.OK, "correct")
    # without a cache flush a small shape may be served from cache: no verdict then
    assert roofline_verdict(beyond, False, "correct") == (Status.OK, "correct")


def test_a_forged_roofline_puts_an_honest_kernel_beyond_it_and_is_rejected(
        silu_task_copy, compile_cache, start):
    # The ideal time is derived from the bytes the task says a kernel must move: claiming a
    # thousand times more puts the honest starting kernel "beyond the roofline".
    task_py = silu_task_copy / "task.py"
    task_py.write_text(task_py.read_text() + "\n\n_honest_roofline = roofline\n\n\n"
                       "def roofline(shape):\n"
                       "    moved, flops = _honest_roofline(shape)\n"
                       "    return 1000 * moved, flops\n")
    settings = quick_settings(compile_cache, flush_cache=True, seeds=1, check_heldout=False,
                              min_repeats=3, timing_budget_s=0.05, run_timeout_s=30.0)
    with SandboxEvaluator(silu_task_copy, "cpp", settings) as ev:
        evaluation = ev.evaluate(start)
    assert evaluation.status is Status.REJECTED, evaluation.message
    assert "the roofline" in evaluation.message and "not reported as a result" in evaluation.message
    assert any(s.roofline_fraction > ROOFLINE_MARGIN for s in evaluation.shapes)
    assert all(math.isfinite(s.time_us) for s in evaluation.shapes)


def test_a_cuda_kernel_that_starts_a_stream_of_its_own_is_rejected_before_it_builds(tmp_path):
    # The screen runs where the evaluator is built, without a GPU.
    settings = EvaluatorSettings(device="cuda", cache_dir=tmp_path, cuda_arch="sm_90")
    evaluator = SandboxEvaluator(SILU_TASK, "cuda", settings)
    source = (KERNELS / "cuda_side_stream.cu").read_text()
    evaluation = evaluator.evaluate(evaluator.start_candidate.derive(source=source))
    assert evaluation.status is Status.REJECTED
    assert "static screen: line 6 uses" in evaluation.message and "stream" in evaluation.message
    assert evaluator._spares is None  # no runner was started
