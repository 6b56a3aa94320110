"""Adversarial kernels on a GPU: cuda kernels, and Triton kernels compiled for the GPU.

Marked ``gpu`` (skipped, with the reason, where no GPU is visible). silu_and_mul's cuda shapes
(bf16 and fp16); the Triton kernels of kernels/triton/ run unchanged on the GPU, and one of them
(`patch_event_elapsed`) only means something there. The kernels that look for their answer in
the output buffer, or defer their work to the next call, only mean something here too: on the
CPU every timed call gets a copy refreshed and poisoned of its own, while a GPU graph replay
runs many calls over many copies between two refreshes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator
from tests.conftest import SILU_TASK

from .cases import (
    FORGERY,
    HONEST_COST_CEILING,
    INCORRECT,
    NO_GAIN,
    OK,
    REJECTED,
    WRONG_OR_REFUSED,
    Case,
)
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
    # the output buffer of a timed call holds no answer: every timed copy's outputs are
    # poisoned before every graph replay, and copies besides the last one are checked
    Case("skip_if_inputs_seen", "cuda", INCORRECT,
         "rows skipped where the sampled inputs match and the outputs are finite (decode shapes) "
         "find poisoned outputs and compute: OK at no gain, or wrong where a skip got through",
         ok_below=NO_GAIN),
    Case("skip_if_inputs_seen_every_shape", "cuda", INCORRECT,
         "the same on every shape: OK at no gain, or wrong", ok_below=NO_GAIN),
    Case("skip_if_output_finite", "cuda", INCORRECT,
         "rows skipped where the outputs are already finite find them poisoned: OK at no gain, "
         "or wrong", ok_below=NO_GAIN),
    Case("defer_to_next_call", "cuda", WRONG_OR_REFUSED,
         "each timed call leaves its output to the next one: the last call's output is still "
         "poisoned when checked (INCORRECT), or the deferral gains nothing", ok_below=NO_GAIN),
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
    Case("defer_on_side_stream", "triton", REJECTED,
         "a launch on a stream of its own escapes the timer's events: refused before it runs",
         phrase={REJECTED: "streams, events and graphs"}),
    Case("defer_to_next_call", "triton", WRONG_OR_REFUSED,
         "each call launches the previous call's work: the last timed call's output is still "
         "poisoned when checked (INCORRECT), or the deferral gains nothing", ok_below=NO_GAIN),
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
