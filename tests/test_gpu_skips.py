"""GPU tests skip with a reason where they cannot be judged: no GPU, or one GPU shared by
several test processes (pytest -n N), whose time slices would disturb every timing."""

from __future__ import annotations

import pytest

from tests.conftest import _shared_gpu_reason


@pytest.mark.parametrize("workers", ["2", "8"])
def test_several_test_processes_skip_the_gpu_tests_and_say_how_to_run_them(monkeypatch, workers):
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", workers)
    reason = _shared_gpu_reason()
    assert reason is not None
    assert f"{workers} test processes" in reason and "without -n" in reason


@pytest.mark.parametrize("workers", [None, "1"])
def test_one_test_process_runs_the_gpu_tests(monkeypatch, workers):
    if workers is None:
        monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    else:
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", workers)
    assert _shared_gpu_reason() is None
