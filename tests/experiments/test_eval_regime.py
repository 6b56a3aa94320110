"""``kernelswarm eval`` of a kernel file outside any run times it as ``kernelswarm run`` would:
the same cache regime and timing settings, so that the starting kernel's figure over PyTorch
reads alike in both (it read 1.321x cold in eval, 0.605x warm in the quickstart)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kernelswarm.evaluators.measure.timing_protocol import TimingSettings
from kernelswarm.experiments.config import load_config
from kernelswarm.experiments.run.prepare import evaluator_settings
from tests.conftest import SILU_TASK

pytestmark = pytest.mark.slow


def test_eval_of_a_file_outside_a_run_times_it_as_a_default_run_does(compile_cache, tmp_path):
    env = {**os.environ, "KERNELSWARM_CACHE": str(compile_cache)}
    done = subprocess.run([sys.executable, "-m", "kernelswarm.experiments.commands.cli", "eval",
                           "silu_and_mul", str(SILU_TASK / "silu_and_mul.cpp"), "--json"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    # what `kernelswarm run --task silu_and_mul` writes to its summary.json's "timing"
    run = TimingSettings.of(evaluator_settings(load_config(None, ["task.name=\"silu_and_mul\""])))
    assert doc["timing"] == {**run.as_dict(), "regime": run.regime}
    assert doc["timing"]["regime"] == "warm cache (not flushed)"  # the quickstart's
    assert doc["timing_source"] == ("timed as `kernelswarm run` times by default "
                                    "(quickstart.toml): warm cache (not flushed)")
    # each shape's baseline times, carried over from their cached measurement, say by how much
    assert all(shape["baseline_scale"] > 0 for shape in doc["shapes"])
    # torch.compile is not measured on the CPU: no figure, not a 0.0x
    assert doc["speedup_vs_compile"] is None
    assert doc["speedup_vs_eager"] > 0
