"""The cuda language on a real GPU: verdicts, recovery from crashes and hangs, knobs, timing.

Marked ``gpu``: skipped, with the reason printed, where no GPU is visible. The tests share one
evaluator, so the recovery tests also prove that a crash or a hang does not leak into the next
candidate's process.
"""

from __future__ import annotations

import pytest

from kernelswarm.search import Status

pytestmark = pytest.mark.gpu


def test_the_starting_kernel_is_ok_timed_profiled_and_near_one(cuda_evaluator, cuda_start):
    evaluation = cuda_evaluator.evaluate(cuda_start)
    assert evaluation.status is Status.OK, evaluation.message
    assert len(evaluation.shapes) == 6
    for shape in evaluation.shapes:
        assert shape.correct and shape.samples >= 10
        assert shape.time_us > 0 and shape.start_time_us > 0 and shape.eager_time_us > 0
        assert 0 < shape.roofline_fraction <= 1.5
    assert 0.8 < evaluation.speedup < 1.25, [(s.shape, s.speedup_vs_start)
                                             for s in evaluation.shapes]
    assert evaluation.device.startswith("cuda: ")
    # tensors stayed on the device, exchanged with a runner forked from the template
    assert evaluation.cost.arena == "device"
    assert evaluation.cost.runner_started_as == "forked from the runner template"
    kernels = {k.kernel: k for k in evaluation.kernel_resources}
    assert kernels["silu_and_mul_bf16"].registers > 0
    assert kernels["silu_and_mul_bf16"].spill_store_bytes == 0
    assert {tuple(launch["block"]) for launch in evaluation.resources["launches"]} == {(256, 1, 1)}
    launches = evaluation.profile.launches
    assert any(k.kernel == "silu_and_mul_bf16" for rows in launches.values() for k in rows)
    assert {t["mode"] for t in evaluation.metrics["timing"].values()} <= {"graph", "events"}


def test_a_compile_error_carries_nvrtcs_log(cuda_evaluator, cuda_variant):
    evaluation = cuda_evaluator.evaluate(cuda_variant("compile_error"))
    assert evaluation.status is Status.COMPILE_ERROR
    assert "undeclared_scale" in evaluation.message


def test_wrong_math_is_incorrect(cuda_evaluator, cuda_variant):
    evaluation = cuda_evaluator.evaluate(cuda_variant("wrong_math"))
    assert evaluation.status is Status.INCORRECT
    assert "wrong result on shape d=11008,dtype=bfloat16,tokens=1" in evaluation.message


def test_an_out_of_bounds_write_is_an_illegal_address_and_the_next_runs_clean(
        cuda_evaluator, cuda_variant, cuda_start):
    evaluation = cuda_evaluator.evaluate(cuda_variant("out_of_bounds"))
    assert evaluation.status is Status.RUNTIME_ERROR
    assert "illegal memory access" in evaluation.message
    assert "sandbox process was replaced" in evaluation.message
    assert cuda_evaluator.evaluate(cuda_start).status is Status.OK


def test_an_endless_loop_times_out_and_the_next_runs_clean(cuda_evaluator, cuda_variant,
                                                           cuda_start):
    evaluation = cuda_evaluator.evaluate(cuda_variant("endless_loop"))
    assert evaluation.status is Status.TIMEOUT
    assert "run_timeout_s" in evaluation.message
    assert cuda_evaluator.evaluate(cuda_start).status is Status.OK


def test_knobs_change_the_launch_geometry(cuda_evaluator, cuda_start):
    evaluation = cuda_evaluator.evaluate(cuda_start.derive(knobs={"BLOCK": 128}))
    assert evaluation.status is Status.OK, evaluation.message
    assert {tuple(launch["block"]) for launch in evaluation.resources["launches"]} == {(128, 1, 1)}


def test_a_deliberately_slower_kernel_times_slower(cuda_evaluator, cuda_variant):
    evaluation = cuda_evaluator.evaluate(cuda_variant("slow"))
    assert evaluation.status is Status.OK, evaluation.message
    per_shape = {s.shape: round(s.speedup_vs_start, 3) for s in evaluation.shapes}
    assert evaluation.speedup < 0.8, per_shape
