"""The CuTe gemm benchmark's arguments on the CPU (the timing needs a GPU:
benchmarks/cute_gpu_jobs.sh): knob settings from the task's space or as asked."""

from __future__ import annotations

import pytest

from benchmarks.cute_gemm import knob_settings, label, tflops

SPACE = {"BM": (128, 64), "BN": (128, 64), "STAGES": (3, 2)}


def test_every_setting_of_the_space_by_default():
    settings = knob_settings(SPACE, [])
    assert len(settings) == 8 and settings[0] == {"BM": 128, "BN": 128, "STAGES": 3}
    assert len({label(s) for s in settings}) == 8


def test_asked_settings_fill_unnamed_knobs_with_their_first_value():
    assert knob_settings(SPACE, ["BN=64", "BM=64,STAGES=2"]) == [
        {"BM": 128, "BN": 64, "STAGES": 3}, {"BM": 64, "BN": 128, "STAGES": 2}]


@pytest.mark.parametrize("asked", ["BM=32", "TILE=16", "BM=big"])
def test_a_setting_outside_the_space_is_refused_naming_it(asked):
    with pytest.raises(ValueError, match=f"{asked!r} is not one of BM in"):
        knob_settings(SPACE, [asked])


def test_tflops_counts_two_flops_a_multiply_add():
    assert tflops({"m": 4096, "n": 4096, "k": 4096}, 174.8) == pytest.approx(786.3, rel=1e-3)
    assert tflops({"m": 1, "n": 1, "k": 1}, None) is None
