"""Fixtures for the GPU tests: one cuda evaluator for silu_and_mul shared by the module's tests.

Its timing budgets are small and its run limit (15 s) short enough to test timeouts; everything
else (L2 flush, graph replay, correctness on every shape) is as in a real run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator
from kernelswarm.search import Candidate, load_task
from tests.conftest import SILU_TASK

KERNELS = Path(__file__).parent / "kernels"
RUN_TIMEOUT_S = 15.0


def gpu_settings(cache_dir: Path, **overrides) -> EvaluatorSettings:
    values = dict(device="cuda", cache_dir=cache_dir, run_timeout_s=RUN_TIMEOUT_S, seeds=2,
                  warmup=2, min_repeats=10, max_repeats=100, timing_budget_s=0.3)
    values.update(overrides)
    return EvaluatorSettings(**values)


@pytest.fixture(scope="session")
def cuda_start() -> Candidate:
    return load_task(SILU_TASK, "cuda").starting_candidate("cuda")


@pytest.fixture(scope="session")
def cuda_variant(cuda_start: Candidate):
    """``cuda_variant("wrong_math")``: the starting candidate with a kernel from kernels/."""

    def make(name: str) -> Candidate:
        return cuda_start.derive(source=(KERNELS / f"{name}.cu").read_text())

    return make


@pytest.fixture(scope="module")
def cuda_evaluator(compile_cache: Path) -> Iterator[SandboxEvaluator]:
    evaluator = SandboxEvaluator(SILU_TASK, "cuda", gpu_settings(compile_cache))
    yield evaluator
    evaluator.close()
