"""The scaling benchmark's own arithmetic and files, without a GPU (its runs need one:
docs/cluster.md "Several GPUs")."""

from __future__ import annotations

import pytest

from benchmarks import scaling
from kernelswarm.experiments.sweep.sweep_file import load_sweep


def test_a_derived_sweep_keeps_the_gpu_sweeps_settings_with_its_own_grid(tmp_path):
    path = scaling.derived_sweep(tmp_path / "load.toml", ["silu_and_mul"], ["cuda", "triton"],
                                 "load")
    spec = load_sweep(path)
    original = load_sweep(scaling.SWEEP_FILE)
    assert [(c.config.task.name, c.config.task.language) for c in spec.cells] == [
        ("silu_and_mul", "cuda"), ("silu_and_mul", "triton")]
    # every setting of the ready sweep's cells, but for the grid's and the sweep's name
    ours, theirs = spec.cells[0].config.model_dump(), original.cells[0].config.model_dump()
    for config in (ours, theirs):
        del config["run"]["name"], config["tracking"]["experiment"]
    assert ours == theirs


def test_timing_differences_against_the_mean_of_the_two_alone():
    times = {"alone 1": {"a": 10.0, "b": 100.0}, "alone 2": {"a": 10.2, "b": 99.0},
             "others busy": {"a": 10.1, "b": 101.0}}
    found = scaling.timing_differences(times)
    assert found["alone_vs_alone_max"] == pytest.approx(0.2 / 10.1)
    assert found["others_busy_vs_alone"]["a"] == pytest.approx(0.0, abs=1e-4)
    assert found["others_busy_vs_alone_max"] == pytest.approx(101.0 / 99.5 - 1, abs=1e-4)
    assert scaling.timing_differences({"alone 1": {"a": 1.0}}) == {}


def test_the_sweep_folder_is_read_from_what_the_sweep_prints():
    printed = "kernelswarm sweep grid · 6 cells, 6 to run\nsweep folder (log: sweep.log):\n" \
              "/tmp/x/sweeps/gpu-grid-20261127-1\n4 evaluation worker(s)\n"
    assert str(scaling._sweep_dir(printed)) == "/tmp/x/sweeps/gpu-grid-20261127-1"
    assert scaling._sweep_dir("nothing") is None
    assert scaling.sweep_figures(None) == {"error": "the sweep wrote no workers.json"}


def test_the_stream_kernel_has_the_knobs_the_tune_step_varies(tmp_path):
    source = scaling.stream_kernel(tmp_path).read_text()
    assert "#ifndef BLOCK" in source and "#ifndef WAVES" in source
    settings = 1
    for values in scaling.STREAM_KNOBS.values():
        settings *= len(values)
    assert settings >= 80 * 2
