"""Fixtures for the built-in agent's tests: the silu_and_mul task, g++ and a real evaluator.

Generated kernels never run in the test process: correctness goes through the project's
``SandboxEvaluator`` (one per test module, since starting its sandbox costs seconds), and
compile checks run g++ in a subprocess.
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from kernelswarm.search import Candidate, Task, load_task
from tests.conftest import SILU_TASK

CXX_FLAGS = ("-O3", "-fPIC", "-shared", "-std=c++17")

Compile = Callable[..., subprocess.CompletedProcess]


@pytest.fixture(scope="session")
def silu_task() -> Task:
    return load_task(SILU_TASK)


@pytest.fixture(scope="session")
def start(silu_task: Task) -> Candidate:
    """The task's starting cpp kernel: scalar loop, libm expf, no knobs."""
    return silu_task.starting_candidate("cpp")


@pytest.fixture(scope="session")
def gxx() -> str:
    found = shutil.which("g++")
    if found is None:
        pytest.skip("g++ is not installed")
    return found


@pytest.fixture
def compile_cpp(gxx: str, tmp_path: Path) -> Compile:
    """``compile_cpp(source, knobs={}, extra=())``: run g++ with the evaluator's flags on it."""
    counter = itertools.count()

    def run(source: str, knobs: Mapping[str, Any] | None = None,
            extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
        n = next(counter)
        path = tmp_path / f"kernel{n}.cpp"
        path.write_text(source)
        defines = [f"-D{k}={v}" for k, v in (knobs or {}).items()]
        argv = [gxx, *CXX_FLAGS, *defines, *extra, str(path), "-o", str(tmp_path / f"k{n}.so")]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120)

    return run


@pytest.fixture(scope="module")
def evaluator(compile_cache: Path) -> Iterator[Any]:
    """A real sandboxed evaluator of silu_and_mul in cpp with small timing budgets."""
    evaluators = pytest.importorskip("kernelswarm.evaluators")
    settings = evaluators.EvaluatorSettings(cache_dir=compile_cache, timing_budget_s=0.05,
                                            min_repeats=3, flush_cache=False)
    ev = evaluators.SandboxEvaluator(SILU_TASK, "cpp", settings)
    yield ev
    ev.close()


@pytest.fixture(scope="module")
def cuda_evaluate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable]:
    """``run(task, candidate)``: judge a cuda candidate of a built-in task on the GPU, one
    quick-timing ``SandboxEvaluator`` per task for the module."""
    from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator
    from tests.agents.test_cuda_transforms import TASKS

    cache = tmp_path_factory.mktemp("cuda-gpu-builds")
    evaluators: dict[str, SandboxEvaluator] = {}

    def run(task: str, candidate: Candidate):
        if task not in evaluators:
            evaluators[task] = SandboxEvaluator(TASKS / task, "cuda", EvaluatorSettings(
                device="cuda", cache_dir=cache, run_timeout_s=60.0, seeds=2, warmup=2,
                min_repeats=10, max_repeats=50, timing_budget_s=0.1))
        return evaluators[task].evaluate(candidate)

    yield run
    for evaluator in evaluators.values():
        evaluator.close()
