"""Cheating cuda kernels on a real GPU, each caught with its status.

Marked ``gpu``: skipped, with the reason printed, where no GPU is visible. One cuda evaluator on
silu_and_mul's cuda shapes (bf16 and fp16) with two seeds, which cuda_stops_when_timed.cu counts
on. The kernels define both entry points the task's launcher picks by dtype.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator
from kernelswarm.search import Candidate, Status
from tests.conftest import SILU_TASK
from tests.evaluators.kernel_library import KERNELS

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cuda_cheats(compile_cache: Path) -> Iterator[SandboxEvaluator]:
    settings = EvaluatorSettings(device="cuda", cache_dir=compile_cache, run_timeout_s=60.0,
                                 seeds=2, warmup=2, min_repeats=10, max_repeats=100,
                                 timing_budget_s=0.3)
    evaluator = SandboxEvaluator(SILU_TASK, "cuda", settings)
    yield evaluator
    evaluator.close()


def _variant(evaluator: SandboxEvaluator, name: str) -> Candidate:
    return evaluator.start_candidate.derive(source=(KERNELS / f"cuda_{name}.cu").read_text())


def test_a_kernel_that_writes_only_on_its_first_launch_is_incorrect(cuda_cheats):
    evaluation = cuda_cheats.evaluate(_variant(cuda_cheats, "first_call_only"))
    assert evaluation.status is Status.INCORRECT, evaluation.message
    assert "on shape d=11008,dtype=bfloat16,tokens=1" in evaluation.message


def test_a_result_cached_by_input_pointer_is_stale_on_refilled_inputs(cuda_cheats):
    evaluation = cuda_cheats.evaluate(_variant(cuda_cheats, "pointer_cache"))
    assert evaluation.status is Status.INCORRECT, evaluation.message
    assert "stale result" in evaluation.message
    assert "same input buffers were refilled with new values" in evaluation.message


def test_a_kernel_that_stops_working_once_timed_fails_a_timed_call(cuda_cheats):
    evaluation = cuda_cheats.evaluate(_variant(cuda_cheats, "stops_when_timed"))
    assert evaluation.status is Status.INCORRECT, evaluation.message
    assert "wrong result of a timed call" in evaluation.message
    assert "during timing" in evaluation.message
