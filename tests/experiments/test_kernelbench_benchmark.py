"""The KernelBench benchmark: fast_p and geomeans computed as defined, and the whole script run
on the CPU with cpp starting kernels over a tiny synthetic level (the GPU run is the same code
with triton kernels and device cuda)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks.kernelbench import (
    ProblemResult,
    fast_p,
    geomean,
    main,
    summarise,
)


def test_fast_p_counts_correct_problems_faster_than_p_over_all_problems():
    results = [ProblemResult("a", "ok", 2.0, 1.2), ProblemResult("b", "ok", 1.2, 0.8),
               ProblemResult("c", "ok", 0.5, 0.4), ProblemResult("d", "no starting kernel")]
    assert fast_p(results, 1.0, "speedup_vs_eager") == 2 / 4
    assert fast_p(results, 1.5, "speedup_vs_eager") == 1 / 4
    assert fast_p(results, 1.0, "speedup_vs_compile") == 1 / 4
    summary = summarise(results)
    assert summary["geomean_vs_eager"] == pytest.approx((2.0 * 1.2 * 0.5) ** (1 / 3))
    assert summary["geomean_vs_eager_over"] == 3 and summary["correct"] == 3
    # compile not measured (as on a CPU by default): no figure, not zero
    unmeasured = [ProblemResult("a", "ok", 2.0)]
    assert math.isnan(fast_p(unmeasured, 1.0, "speedup_vs_compile"))
    assert math.isnan(geomean([]))


RELU = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


batch_size = 8
dim = 1024 * 2


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

SCALE = RELU.replace("def forward(self, x):\n        return torch.relu(x)",
                     "def forward(self, x, s):\n        return x * s").replace(
    "[torch.randn(batch_size, dim)]", "[torch.randn(batch_size, dim), 1.5]")

# One problem is searched (a search takes most of this test's time); the others show how a
# problem without a starting kernel and one that is not a problem are counted.
STARTS = {
    "2_Scale.cpp": """
#include <stdint.h>
extern "C" void forward(const float* x, double s, float* out, const int64_t* sizes) {
    for (int64_t i = 0; i < sizes[0] * sizes[1]; ++i) out[i] = x[i] * (float)s;
}""",
}


@pytest.mark.slow
def test_the_benchmark_runs_the_agent_over_a_level_and_reports(tmp_path, compile_cache,
                                                               ray_session, capsys):
    level = tmp_path / "KernelBench" / "KernelBench" / "level1"
    level.mkdir(parents=True)
    for name, text in (("1_ReLU.py", RELU), ("2_Scale.py", SCALE), ("3_NoStart.py", RELU),
                       ("4_Broken.py", "x = 1\n"), ("5_Outside.py", RELU)):
        (level / name).write_text(text)
    starts = tmp_path / "starts"
    starts.mkdir()
    for name, text in STARTS.items():
        (starts / name).write_text(text)
    report_file = tmp_path / "report.json"
    assert main(["--kernelbench", str(tmp_path / "KernelBench"), "--level", "1", "--first", "4",
                 "--starts", str(starts), "--language", "cpp", "--device", "cpu",
                 "--lineages", "1", "--minutes", "10", "--out", str(tmp_path / "out"),
                 "--json", str(report_file),
                 "--set", "search.candidates_per_lineage=1", "--set", "search.confirm_repeats=0",
                 "--set", f'evaluator.cache_dir="{compile_cache}"',
                 "--set", "timing.budget_s=0.05", "--set", "timing.max_repeats=20"]) == 0
    report = json.loads(report_file.read_text())
    rows = {r["problem"]: r for r in report["problems"]}
    assert list(rows) == ["1_ReLU", "2_Scale", "3_NoStart", "4_Broken"]  # --first 4
    assert rows["2_Scale"]["status"] == "ok"
    assert rows["1_ReLU"]["status"] == "no starting kernel (1_ReLU.cpp not in --starts)"
    assert rows["4_Broken"]["status"].startswith("not imported")
    scale = rows["2_Scale"]
    # the starting kernel and the built-in agent's candidate were judged
    assert scale["speedup_vs_eager"] > 0 and scale["evaluations"] >= 2
    assert Path(scale["run_dir"]).is_dir()
    assert scale["speedup_vs_compile"] is None  # not measured on the cpu
    summary = report["summary"]
    assert summary["fast_1_vs_eager"] == (scale["speedup_vs_eager"] > 1) / 4
    assert summary["correct"] == 1
    assert summary["geomean_vs_eager"] == pytest.approx(scale["speedup_vs_eager"])
    assert summary["fast_1_vs_compile"] is None
    printed = capsys.readouterr().out
    assert "| eager |" in printed and "| compile | not measured" in printed
    assert "1 of 4 problems have a correct kernel" in printed
