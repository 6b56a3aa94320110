"""The torch-ext language on a real GPU: a CUDA extension built for the device's architecture.

Marked ``gpu``. Each build compiles CUDA with nvcc (about a minute): two builds in all.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator
from kernelswarm.search import Status
from tests.conftest import SILU_TASK
from tests.evaluators.kernel_library import KERNELS

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def ext_gpu(compile_cache: Path) -> Iterator[SandboxEvaluator]:
    settings = EvaluatorSettings(device="cuda", cache_dir=compile_cache, compile_timeout_s=900.0,
                                 run_timeout_s=120.0, seeds=2, warmup=2, min_repeats=10,
                                 max_repeats=100, timing_budget_s=0.3)
    evaluator = SandboxEvaluator(SILU_TASK, "torch-ext", settings)
    yield evaluator
    evaluator.close()


def test_the_starting_extension_builds_with_cuda_and_is_ok(ext_gpu):
    built = ext_gpu.compile(ext_gpu.start_candidate)
    assert built.ok, built.log
    evaluation = ext_gpu.evaluate(ext_gpu.start_candidate)
    assert evaluation.status is Status.OK, evaluation.message
    assert 0.67 < evaluation.speedup < 1.5, [(s.shape, s.speedup_vs_start)
                                             for s in evaluation.shapes]
    for shape in evaluation.shapes:
        assert shape.correct and 0 < shape.roofline_fraction <= 1.5


def test_aten_compute_inside_the_extension_is_rejected(ext_gpu):
    source = (KERNELS / "torch_ext_calls_aten.cpp").read_text()
    evaluation = ext_gpu.evaluate(ext_gpu.start_candidate.derive(source=source))
    assert evaluation.status is Status.REJECTED, evaluation.message
    assert "calls PyTorch compute (aten::sigmoid at the kernel's native code" in \
        evaluation.message
