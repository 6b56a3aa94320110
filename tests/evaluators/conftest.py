"""Fixtures for the evaluator tests: adversarial kernels and evaluators that share a sandbox.

Starting a sandbox costs a few seconds (torch import, machine figures, eager timing), so the
tests that need one share the session's ``evaluator``; its timing settings are small, its caches
unflushed, and its run limit (3 s) short enough to test timeouts.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelswarm.evaluators import SandboxEvaluator
from kernelswarm.search import Candidate, load_task
from tests.conftest import SILU_TASK
from tests.evaluators.kernel_library import kernel_source, quick_settings


@pytest.fixture(scope="session")
def start() -> Candidate:
    return load_task(SILU_TASK).starting_candidate("cpp")


@pytest.fixture(scope="session")
def variant(start: Candidate):
    """``variant("wrong_math")``: the starting candidate with a kernel from kernels/."""

    def make(name: str, **knob_space) -> Candidate:
        space = {k: tuple(v) for k, v in knob_space.items()}
        return start.derive(source=kernel_source(name), knob_space=space or None)

    return make


@pytest.fixture(scope="session")
def evaluator(compile_cache: Path) -> Iterator[SandboxEvaluator]:
    ev = SandboxEvaluator(SILU_TASK, "cpp", quick_settings(compile_cache))
    yield ev
    ev.close()


# Triton's CPU interpreter takes ~10 ms a launch and ~1 us an element: tiny shapes keep the
# triton tests quick while still covering a partial block and held-out sizes.
TINY_SHAPES = """
TUNING_SHAPES = [{"tokens": 1, "d": 256, "dtype": "float32"},
                 {"tokens": 4, "d": 512, "dtype": "float32"}]
HELDOUT_SHAPES = [{"tokens": 3, "d": 100, "dtype": "float32"},
                  {"tokens": 2, "d": 1030, "dtype": "float32"}]
"""


@pytest.fixture(scope="session")
def tiny_silu_task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """silu_and_mul with tiny shapes, for kernels run by Triton's interpreter."""
    folder = tmp_path_factory.mktemp("tasks") / "silu_and_mul_tiny"
    shutil.copytree(SILU_TASK, folder)
    with open(folder / "task.py", "a") as task:
        task.write(TINY_SHAPES)
    return folder


@pytest.fixture(scope="session")
def triton_evaluator(tiny_silu_task: Path, compile_cache: Path) -> Iterator[SandboxEvaluator]:
    """One triton evaluator (interpreter) shared by the triton tests; a 30 s run limit."""
    ev = SandboxEvaluator(tiny_silu_task, "triton", quick_settings(compile_cache,
                                                                   run_timeout_s=30.0))
    yield ev
    ev.close()


@pytest.fixture(scope="session")
def offline_evaluator(compile_cache: Path) -> Iterator[SandboxEvaluator]:
    """For what never reaches the sandbox (screen, compile): it is never started here."""
    ev = SandboxEvaluator(SILU_TASK, "cpp", quick_settings(compile_cache))
    yield ev
    ev.close()
