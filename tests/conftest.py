"""Shared fixtures: one Ray instance per test session; GPU tests skipped with a reason."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SILU_TASK = ROOT / "experiments" / "tasks" / "silu_and_mul"


def _gpu_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no NVIDIA GPU visible to torch (CPU-only machine)"
    return None


def _shared_gpu_reason() -> str | None:
    """Why GPU tests may not run here though a GPU is present: several test processes (pytest
    -n N) share it. Processes on one GPU take turns in time slices of milliseconds, so a timed
    call waits on another process's kernels: the evaluator then rightly judges the timing
    disturbed, and several evaluators at once can fill the GPU's memory."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")
    if workers.isdigit() and int(workers) > 1:
        return (f"{workers} test processes would share the GPU and disturb each other's "
                f"timing: run the GPU tests in one process (pytest -m gpu, without -n)")
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = _gpu_reason()
    if reason is None:
        # torch.compile's baselines cost minutes a task on a GPU and only the baselines' own
        # tests look at them (they switch it back on): leave them out of every other evaluator
        from kernelswarm.evaluators.baselines.baselines import COMPILE_ENV

        os.environ.setdefault(COMPILE_ENV, "0")
        shared = _shared_gpu_reason()
        if shared is None:
            return
        skip = pytest.mark.skip(reason=shared)
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
        return
    skip = pytest.mark.skip(reason=f"needs a GPU: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray instance shared by every test that needs Ray."""
    from kernelswarm.cluster import connect, disconnect

    info = connect(num_cpus=2)
    yield info
    disconnect(info)


# A folder every test process may share as its compile, baseline and calibration cache (all
# content-hashed, so sharing is safe): the GPU check (benchmarks/gpu_check.py) runs
# one pytest per test file and per GPU, which then calibrate each task once, not once a file.
TEST_CACHE_ENV = "KERNELSWARM_TEST_CACHE"


@pytest.fixture(scope="session")
def compile_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A compile cache shared by the session's tests (content-hashed, so sharing is safe)."""
    shared = os.environ.get(TEST_CACHE_ENV)
    if shared:
        Path(shared).mkdir(parents=True, exist_ok=True)
        return Path(shared)
    return tmp_path_factory.mktemp("compile-cache")


@pytest.fixture
def silu_task_copy(tmp_path: Path) -> Path:
    """A private copy of the silu_and_mul task folder that a test may edit."""
    dest = tmp_path / "silu_and_mul"
    shutil.copytree(SILU_TASK, dest)
    return dest
