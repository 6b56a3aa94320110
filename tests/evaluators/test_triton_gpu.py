"""The triton language on a real GPU: JIT-compiled kernels on bf16 and fp16 shapes, and cheats.

Marked ``gpu``. One triton evaluator for the module, on silu_and_mul's cuda shapes; its run
limit leaves room for Triton compiling each kernel variant on first use.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator
from kernelswarm.search import Candidate, Status, load_task
from tests.conftest import SILU_TASK
from tests.evaluators.kernel_library import KERNELS

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def triton_gpu(compile_cache: Path) -> Iterator[SandboxEvaluator]:
    settings = EvaluatorSettings(device="cuda", cache_dir=compile_cache, run_timeout_s=180.0,
                                 seeds=2, warmup=2, min_repeats=10, max_repeats=100,
                                 timing_budget_s=0.3)
    evaluator = SandboxEvaluator(SILU_TASK, "triton", settings)
    yield evaluator
    evaluator.close()


def _variant(evaluator: SandboxEvaluator, name: str) -> Candidate:
    source = (KERNELS / f"triton_{name}.py").read_text()
    return evaluator.start_candidate.derive(source=source)


def test_the_triton_starting_kernel_is_ok_on_bf16_and_fp16(triton_gpu):
    evaluation = triton_gpu.evaluate(triton_gpu.start_candidate)
    assert evaluation.status is Status.OK, evaluation.message
    shapes = load_task(SILU_TASK, "cuda").tuning_shapes
    assert {s.shape for s in evaluation.shapes} == {s.label for s in shapes}
    assert {s["dtype"] for s in shapes} >= {"bfloat16", "float16"}
    assert 0.67 < evaluation.speedup < 1.5, [(s.shape, s.speedup_vs_start)
                                             for s in evaluation.shapes]
    for shape in evaluation.shapes:
        assert shape.correct and 0 < shape.roofline_fraction <= 1.5
    assert evaluation.device.startswith("cuda")


@pytest.mark.parametrize("block", [256, 4096])
def test_every_block_size_knob_is_correct(triton_gpu, block):
    evaluation = triton_gpu.evaluate(triton_gpu.start_candidate.derive(knobs={"BLOCK": block}))
    assert evaluation.status is Status.OK, evaluation.message


def test_pytorch_compute_in_the_launcher_is_rejected(triton_gpu):
    evaluation = triton_gpu.evaluate(_variant(triton_gpu, "computes_with_torch"))
    assert evaluation.status is Status.REJECTED, evaluation.message
    assert "calls PyTorch compute (aten::sigmoid at line 8 of the kernel" in evaluation.message


def test_a_result_cached_by_pointer_is_stale_on_refilled_inputs(triton_gpu):
    evaluation = triton_gpu.evaluate(_variant(triton_gpu, "pointer_cache"))
    assert evaluation.status is Status.INCORRECT, evaluation.message
    assert "stale result" in evaluation.message


def test_a_kernel_that_writes_only_on_its_first_call_is_incorrect(triton_gpu):
    evaluation = triton_gpu.evaluate(_variant(triton_gpu, "writes_only_first_call"))
    assert evaluation.status is Status.INCORRECT, evaluation.message


def test_pytorch_compute_once_timed_is_rejected(triton_gpu):
    evaluation = triton_gpu.evaluate(_variant(triton_gpu, "torch_once_timed"))
    assert evaluation.status is Status.REJECTED, evaluation.message
    assert "while being timed" in evaluation.message
    assert "calls PyTorch compute" in evaluation.message
