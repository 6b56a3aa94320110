"""Timing as configured for real runs: flushed caches, machine figures, roofline, speedups."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelswarm.evaluators import SandboxEvaluator
from kernelswarm.evaluators.measure.timing import summarize
from kernelswarm.search import Evaluation
from tests.conftest import SILU_TASK
from tests.evaluators.kernel_library import quick_settings


@pytest.fixture(scope="module")
def flushed_start(compile_cache: Path, start) -> Iterator[Evaluation]:
    settings = quick_settings(compile_cache, flush_cache=True, timing_budget_s=0.3, min_repeats=5,
                              run_timeout_s=30.0, seeds=1, check_heldout=False)
    with SandboxEvaluator(SILU_TASK, "cpp", settings) as ev:
        yield ev.evaluate(start)


def test_starting_kernel_against_itself_with_flushed_caches(flushed_start):
    assert flushed_start.ok, flushed_start.message
    assert 0.6 < flushed_start.speedup < 1.6
    for shape in flushed_start.shapes:
        assert shape.samples >= 5 and shape.time_spread_us >= 0
        assert 0 < shape.roofline_fraction <= 1.5
        assert shape.speedup_vs_eager == pytest.approx(shape.eager_time_us / shape.time_us)
        assert math.isnan(shape.speedup_vs_compile)


def test_machine_figures_and_timing_settings_are_reported(flushed_start):
    metrics, machine = flushed_start.metrics, flushed_start.machine
    assert machine.copy_bandwidth_gbs > 0.1 and machine.peak_gflops > 0.1
    assert metrics["flush_cache"] is True and metrics["flush_bytes"] == 2 * machine.llc_bytes
    assert metrics["min_repeats"] == 5 and metrics["target_rel_se"] == 0.005
    assert set(metrics["timing_rel_se"]) == {s.shape for s in flushed_start.shapes}


def test_standard_error_of_the_median_shrinks_with_more_samples():
    few = summarize([100, 110, 90, 105, 95, 100, 102, 98])
    many = summarize([100, 110, 90, 105, 95, 100, 102, 98] * 16)
    assert few.median_us == pytest.approx(0.1)
    assert many.rel_se < few.rel_se / 3
    assert summarize([100, 100]).rel_se == math.inf  # too few samples to tell
