"""The memory plan of one evaluation: the references' byte budget, copies scaled to the
footprint, spares only where two runners fit, limits that grow with the bytes, and a clear
error where nothing fits. CPU: the GPU figures are the plan's inputs (an H100's memory and L2),
and the end-to-end evaluations run the real judge and runner with a tiny reference budget."""

from __future__ import annotations

import os

import pytest
import torch

from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator
from kernelswarm.evaluators.judge import memory_plan
from kernelswarm.evaluators.judge.calibration import prepare_message
from kernelswarm.evaluators.judge.deadlines import run_deadline, scaled_limit
from kernelswarm.evaluators.judge.memory_plan import (
    GIB,
    EvaluationSizes,
    MemoryPlanError,
    TimedProblem,
    plan_memory,
)
from kernelswarm.evaluators.judge.references import References
from kernelswarm.evaluators.judge.spares import Spares
from kernelswarm.evaluators.judge.timing import returned_copies
from kernelswarm.evaluators.measure.gpu_timing import plan_copies
from kernelswarm.search import Status, load_task
from tests.conftest import SILU_TASK
from tests.evaluators.kernel_library import RUN_TIMEOUT_S, quick_settings

H100_BYTES = 85_029_158_912  # torch.cuda.get_device_properties(...).total_memory of an H100
H100_L2 = 50 * 2 ** 20
KB = 1024
MB = 1024 * KB


def _same(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


# -- the references' budget ----------------------------------------------------------------------

def test_references_keep_what_fits_the_budget_and_recompute_the_same_values():
    task = load_task(SILU_TASK)
    small, large = task.tuning_shapes[0], task.tuning_shapes[2]  # 48 KB and 1.5 MB problems
    refs = References(task, "cpu", budget_bytes=100 * KB)  # two small problems, no large one
    first = refs.get(small, 0)
    assert refs.get(small, 0) is first and refs.hits == 1  # kept: the same tensors
    refs.get(small, 1)
    refs.get(small, 2)  # a third small problem: the least recently used (seed 0) goes
    assert refs.evictions == 1 and refs.held_bytes <= 100 * KB
    again = refs.get(small, 0)  # computed again: identical values, new tensors
    assert again is not first and _same(again[0], first[0]) and _same(again[1], first[1])
    misses = refs.misses
    big = refs.get(large, 0)  # larger than the whole budget: computed, never kept
    assert refs.get(large, 0) is not big and refs.misses == misses + 2
    assert refs.held_bytes <= 100 * KB
    # sizes are remembered without the problem
    inputs, outputs = refs.described(large, 0)
    assert [shape for _, shape, _ in inputs] == [tuple(t.shape) for t in big[0]]
    assert refs.misses == misses + 2
    refs.set_budget(0)
    assert refs.held_bytes == 0 and refs.get(small, 0) is not refs.get(small, 0)


def test_outputs_template_keeps_the_structure_not_the_data():
    task = load_task(SILU_TASK)
    refs = References(task, "cpu")
    shape = task.tuning_shapes[2]
    template = refs.outputs_template(shape)
    made = task.module.make_outputs(dict(shape), "cpu")
    assert [(t.shape, t.dtype, t.device) for t in template] == \
        [(t.shape, t.dtype, t.device) for t in made]
    assert all(type(t) is torch.Tensor and t.untyped_storage().nbytes() <= 8 for t in template)


# -- copies scaled to the footprint ----------------------------------------------------------------

def test_one_copy_per_kernel_only_from_twice_the_l2():
    assert plan_copies(64 * KB, H100_L2).copies == 512  # unchanged: capped at MAX_COPIES
    assert plan_copies(8 * 2 ** 20, H100_L2).copies == 51  # unchanged: 8 L2s of copies
    just_below = plan_copies(2 * H100_L2 - 1, H100_L2)
    assert just_below.copies == 6 and just_below.cold_reuse  # unchanged
    at = plan_copies(2 * H100_L2, H100_L2)
    assert at.copies == 1 and at.cold_reuse
    assert plan_copies(13 * GIB, H100_L2).copies == 1


def test_the_judge_slots_follow_the_runner_copies_and_small_problems_keep_theirs():
    gpu, cpu = EvaluatorSettings(device="cuda"), EvaluatorSettings()
    task = load_task(SILU_TASK)
    for shape in task.tuning_shapes:  # silu_and_mul: 48 KB to 1.5 MB, as before
        footprint = int(task.roofline(shape)[0])
        assert returned_copies(gpu, footprint, H100_L2) == 2
        assert returned_copies(cpu, footprint, 0) == 8
    assert returned_copies(gpu, 2 * H100_L2, H100_L2) == 1
    assert returned_copies(cpu, 13 * GIB, 0) == 8


# -- the plan ----------------------------------------------------------------------------------------

def test_a_kernelbench_size_problem_fits_an_h100_in_about_five_footprints():
    relu = TimedProblem(6_442_450_944, 6_442_450_944)  # 4096 x 393216 fp32 in, and out
    f = relu.footprint
    plan = plan_memory(H100_BYTES, EvaluationSizes([relu], f, f, H100_L2), H100_BYTES // 8)
    assert plan.copies == 1 and plan.arena_bytes == f
    assert plan.evaluation_bytes <= 5 * f + 2 * GIB  # was ~12F: cache 5F, arena 2F, spare 2F..
    assert not plan.spare_in_advance  # a second arena would not fit
    assert 0 <= plan.references_budget <= plan.usable_bytes - plan.evaluation_bytes
    assert plan.references_budget < f  # the problem itself is computed, never kept


def test_a_small_problem_keeps_its_spare_and_the_whole_budget():
    small = TimedProblem(1 << 20, 1 << 19)
    plan = plan_memory(H100_BYTES,
                       EvaluationSizes([small], small.footprint, 2 * small.footprint, H100_L2),
                       H100_BYTES // 8)
    assert plan.spare_in_advance and plan.references_budget == H100_BYTES // 8
    assert plan.copies == plan_copies(small.footprint, H100_L2).copies > 1
    cpu = plan_memory(0, EvaluationSizes([small], small.footprint, small.footprint, 0), 2 * GIB)
    assert cpu.spare_in_advance and cpu.references_budget == 2 * GIB


def test_a_problem_that_cannot_fit_fails_early_naming_the_bytes():
    huge = TimedProblem(8_500_000_000, 8_500_000_000)  # F = 17 GB
    with pytest.raises(MemoryPlanError) as raised:
        plan_memory(H100_BYTES, EvaluationSizes([huge], huge.footprint, huge.footprint, H100_L2),
                    10 * GIB)
    message = str(raised.value)
    assert "needs about" in message and "GiB usable" in message and "79.2 GiB" in message


# -- limits that scale with the bytes ----------------------------------------------------------------

def test_limits_grow_with_the_bytes_moved_and_stay_for_small_problems():
    small = scaled_limit("run_timeout_s", 30.0, 50e6, "cuda")
    assert small.seconds == pytest.approx(30.005)
    big = scaled_limit("run_timeout_s", 30.0, 4e12, "cuda")  # a 13 GB problem's protocol
    assert big.seconds == pytest.approx(430.0) and "run_timeout_s=30 s" in big.describe()
    assert scaled_limit("x", 1.0, 1e9, "cpu").seconds == pytest.approx(3.0)
    task = load_task(SILU_TASK)
    # silu_and_mul (problems of 48 KB to 1.5 MB): within a second of the base on the CPU,
    # whose floor is one thread drawing random numbers; a tenth of a second on a GPU
    limit = run_deadline(task, EvaluatorSettings(run_timeout_s=RUN_TIMEOUT_S))
    assert RUN_TIMEOUT_S < limit.seconds < RUN_TIMEOUT_S + 1.0
    assert f"run_timeout_s={RUN_TIMEOUT_S:g} s" in limit.describe()
    on_gpu = run_deadline(task, EvaluatorSettings(device="cuda", run_timeout_s=RUN_TIMEOUT_S))
    assert on_gpu.allowance_s < 0.1


# -- end to end, with a tiny reference budget --------------------------------------------------------

@pytest.fixture(scope="module")
def lean_evaluator(compile_cache, tmp_path_factory):
    """silu_and_mul with a reference budget of 100 KB: two of its smallest problems."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(memory_plan, "CPU_REFERENCE_BUDGET", 100 * KB)
        with SandboxEvaluator(SILU_TASK, "cpp", quick_settings(compile_cache)) as ev:
            yield ev


def test_eviction_mid_evaluation_keeps_the_verdicts(lean_evaluator, start, variant):
    evaluation = lean_evaluator.evaluate(start)
    assert evaluation.status is Status.OK, evaluation.message
    references = evaluation.metrics["references"]
    assert references["budget_bytes"] == 100 * KB
    assert references["evictions"] > 0 and references["hits"] > 0
    assert all(s.correct for s in evaluation.shapes)
    assert evaluation.metrics["memory_plan"]["spare_in_advance"]
    wrong = lean_evaluator.evaluate(variant("wrong_math"))
    assert wrong.status is Status.INCORRECT and "wrong result" in wrong.message
    modified = lean_evaluator.evaluate(variant("modifies_input"))
    assert modified.status is Status.REJECTED


def test_without_a_spare_in_advance_the_runner_starts_when_taken(lean_evaluator, start):
    lean_evaluator.prepare()
    build = lean_evaluator.cache.build(lean_evaluator.language, start,
                                       lean_evaluator.settings.compile_timeout_s)
    spares = Spares(1 << 20, prepare_message(lean_evaluator, build), None,
                    lean_evaluator.startup_s(), in_advance=False)
    try:
        assert spares.spare is None
        runner = spares.take()
        try:
            assert runner.started_as.startswith("on demand, no spare in advance")
            assert spares.spare is None  # none started behind it
        finally:
            runner.close()
    finally:
        spares.close()


def test_the_plan_fits_several_spares_on_a_big_device_and_one_on_the_cpu():
    small = TimedProblem(1 * MB, 1 * MB)
    plan = plan_memory(H100_BYTES,
                       EvaluationSizes([small], small.footprint, 2 * small.footprint, H100_L2),
                       H100_BYTES // 8)
    assert plan.spares == memory_plan.SPARES_WANTED
    # the references' budget leaves the room of every spare
    assert plan.references_budget <= plan.usable_bytes - plan.evaluation_bytes \
        - plan.spares * plan.spare_bytes
    assert plan_memory(0, EvaluationSizes([small], small.footprint, small.footprint, 0),
                       2 * GIB).spares == 1


def test_spares_widen_to_the_pool_the_cpus_allow(lean_evaluator, start, monkeypatch):
    """A runner's start-up can outlast an evaluation (a Triton runner's, with its profiler):
    several spares then prepare side by side, one per four CPUs, and each take hands over the
    oldest and starts another."""
    lean_evaluator.prepare()
    build = lean_evaluator.cache.build(lean_evaluator.language, start,
                                       lean_evaluator.settings.compile_timeout_s)
    spares = Spares(1 << 20, prepare_message(lean_evaluator, build), None,
                    lean_evaluator.startup_s(), in_advance=True)
    try:
        assert len(spares.spares) == 1
        monkeypatch.setattr(os, "sched_getaffinity", lambda _: set(range(2)))
        spares.widen(3)
        assert len(spares.spares) == 1  # two CPUs: room for one start-up beside the judging
        monkeypatch.setattr(os, "sched_getaffinity", lambda _: set(range(8)))
        spares.widen(3)
        assert len(spares.spares) == 2
        oldest = spares.spare
        runner = spares.take()
        try:
            assert runner is oldest and len(spares.spares) == 2 and oldest not in spares.spares
        finally:
            runner.close()
    finally:
        spares.close()
    assert spares.spares == []
