"""Fixtures of the adversarial suite: one evaluator per language and module, probes per case.

The sandboxes of this package make their scratch folders in a private temporary folder, so that
a folder left behind is seen (and not confused with another test's).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelswarm.evaluators import SandboxEvaluator
from kernelswarm.search import Candidate, load_task
from tests.conftest import SILU_TASK
from tests.evaluators.kernel_library import quick_settings

from .judging import Probes, scratch_folders


@pytest.fixture(scope="package", autouse=True)
def private_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("adversarial-tmp")
    saved_dir, saved_env = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir, os.environ["TMPDIR"] = str(folder), str(folder)
    yield folder
    left = scratch_folders()  # every evaluator of the package is closed by now
    tempfile.tempdir = saved_dir
    if saved_env is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = saved_env
    assert left == [], f"evaluators left their scratch folders behind: {left}"


def cpp_evaluator_for(compile_cache: Path) -> SandboxEvaluator:
    """silu_and_mul's CPU shapes, quick timing, a 3 s run limit."""
    return SandboxEvaluator(SILU_TASK, "cpp", quick_settings(compile_cache))


def triton_evaluator_for(task: Path, compile_cache: Path) -> SandboxEvaluator:
    """Triton's interpreter on ``task`` (the tiny shapes), quick timing, a 30 s run limit."""
    return SandboxEvaluator(task, "triton", quick_settings(compile_cache, run_timeout_s=30.0))


@pytest.fixture(scope="module")
def cpp_evaluator(compile_cache: Path) -> Iterator[SandboxEvaluator]:
    evaluator = cpp_evaluator_for(compile_cache)
    yield evaluator
    evaluator.close()


@pytest.fixture(scope="module")
def cpp_start() -> Candidate:
    return load_task(SILU_TASK).starting_candidate("cpp")


@pytest.fixture(scope="module")
def triton_evaluator(tiny_silu_task: Path, compile_cache: Path) -> Iterator[SandboxEvaluator]:
    evaluator = triton_evaluator_for(tiny_silu_task, compile_cache)
    yield evaluator
    evaluator.close()


@pytest.fixture(scope="module")
def triton_start(tiny_silu_task: Path) -> Candidate:
    return load_task(tiny_silu_task).starting_candidate("triton")


@pytest.fixture
def probes(tmp_path: Path) -> Iterator[Probes]:
    opened = Probes.open(tmp_path)
    yield opened
    opened.close()
