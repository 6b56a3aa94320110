"""Adversarial kernels on a GPU: cuda kernels, and Triton kernels compiled for the GPU.

Marked ``gpu`` (skipped, with the reason, where no GPU is visible). silu_and_mul's cuda shapes
(bf16 and fp16); the Triton kernels of kernels/triton/ run unchanged on the GPU, and one of them
(`patch_event_elapsed`) only means something there.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator
from tests.conftest import SILU_TASK

from .cases import FORGERY, HONEST_COST_CEILING, INCORRECT, OK, REJECTED, Case
from .judging import run_case

pytestmark = pytest.mark.gpu

CUDA_CASES = [
    Case("honest_start", "cuda", OK, "the task's own starting kernel",
         source=SILU_TASK / "silu_and_mul.cu"),
    Case("skips_rows_past_4096", "cuda", INCORRECT,
         "a held-out shape has more tokens than the largest tuning shape's 4096"),
    Case("launch_counter_skip", "cuda", INCORRECT,
         "skipped timed launches leave outputs unwritten, which a check of a sample of the timed "
         "outputs finds; or the skip never pays off and the kernel is judged at its honest, "
         "four-fold cost", ok_below=HONEST_COST_CEILING),
]

GPU_TRITON_CASES = [
    Case("honest_start", "triton", OK, "the task's own starting kernel, on the GPU",
         source=SILU_TASK / "silu_and_mul_triton.py"),
    Case("host_torch_direct", "triton", REJECTED,
         "PyTorch kernels launched by the timed call, not its own: REJECTED with the reason"),
    Case("indirection_table", "triton", REJECTED,
         "PyTorch kernels launched through a table of functions: REJECTED with the reason"),
    Case("forge_result_frame", "triton", FORGERY,
         "a forged frame is not the verdict: the kernel's zeros are INCORRECT, or the frame is "
         "refused (REJECTED) or garbles the channel (RUNTIME_ERROR)"),
    Case("patch_event_elapsed", "triton", REJECTED,
         "the events are read where the candidate cannot patch them, or their figure disagrees "
         "with the wall time measured outside (REJECTED); unpatched, the honest four-fold cost",
         ok_below=HONEST_COST_CEILING),
]


def _gpu_settings(cache: Path) -> EvaluatorSettings:
    return EvaluatorSettings(device="cuda", cache_dir=cache, run_timeout_s=60.0, seeds=2,
                             warmup=2, min_repeats=10, max_repeats=100, timing_budget_s=0.3,
                             profile_kernels=False)


@pytest.fixture(scope="module")
def cuda_judge(compile_cache: Path) -> Iterator[SandboxEvaluator]:
    with SandboxEvaluator(SILU_TASK, "cuda", _gpu_settings(compile_cache)) as evaluator:
        yield evaluator


@pytest.fixture(scope="module")
def gpu_triton_judge(compile_cache: Path, cuda_judge: SandboxEvaluator
                     ) -> Iterator[SandboxEvaluator]:
    # the cuda cases come first; their evaluator's spare runner (a scratch folder) goes now, so
    # that each triton case finds only its own evaluator's sandbox left
    cuda_judge.close()
    with SandboxEvaluator(SILU_TASK, "triton", _gpu_settings(compile_cache)) as evaluator:
        yield evaluator


@pytest.mark.parametrize("case", CUDA_CASES, ids=str)
def test_cuda_case(case, cuda_judge, probes, record_property):
    run_case(case, cuda_judge, cuda_judge.start_candidate, probes, record_property)


@pytest.mark.parametrize("case", GPU_TRITON_CASES, ids=str)
def test_gpu_triton_case(case, gpu_triton_judge, probes, record_property):
    run_case(case, gpu_triton_judge, gpu_triton_judge.start_candidate, probes, record_property)
