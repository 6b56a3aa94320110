"""Baselines on a GPU: the static compile in its best mode, library anchors checked or skipped as
not installed, the starting kernel timed alongside; on the largest silu_and_mul shape the best
baseline is near the copy roofline, never eager."""

from __future__ import annotations

import pytest

from kernelswarm.evaluators import EvaluatorSettings
from kernelswarm.evaluators.baselines.baselines import (
    COMPILE,
    COMPILE_ENV,
    EAGER,
    measure_baselines,
)
from tests.conftest import SILU_TASK

pytestmark = pytest.mark.gpu


def test_silu_and_mul_baselines_on_the_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv(COMPILE_ENV, "1")
    settings = EvaluatorSettings(device="cuda", cache_dir=tmp_path, timing_budget_s=0.1)
    table = measure_baselines(SILU_TASK, settings, language="cuda")
    assert table.device.startswith("cuda") and table.language == "cuda"
    for shape, row in table.shapes.items():
        assert row[EAGER].ok and table.start[shape].ok, (shape, row)
        compiled = row[COMPILE]
        assert compiled.ok and compiled.detail.startswith("mode "), (shape, compiled)
        assert compiled.first_call_s > 0
        for name in ("liger", "flashinfer", "sgl-kernel"):
            if name in table.skipped:
                assert table.skipped[name].startswith("not installed"), table.skipped
            else:  # installed: checked against the reference, then timed
                assert row[name].ok or row[name].error.startswith("incorrect"), row[name]
    name, best = table.best("d=14336,dtype=bfloat16,tokens=4096")
    assert name != EAGER
    # 4096 x 14336 bf16 moves 352 MB: well under 200 us at H100/H200 bandwidth
    assert best.median_us < 200
