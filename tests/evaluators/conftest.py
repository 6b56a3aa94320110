"""Fixtures for the evaluator tests: adversarial kernels and evaluators that share a sandbox.

Starting a sandbox costs a few seconds (torch import, machine figures, eager timing), so the
tests that need one share the session's ``evaluator``; its timing settings are small, its caches
unflushed, and its run limit (3 s) short enough to test timeouts.
"""

from __future__ import annotations

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


@pytest.fixture(scope="session")
def offline_evaluator(compile_cache: Path) -> Iterator[SandboxEvaluator]:
    """For what never reaches the sandbox (screen, compile): it is never started here."""
    ev = SandboxEvaluator(SILU_TASK, "cpp", quick_settings(compile_cache))
    yield ev
    ev.close()
