"""The baselines benchmark without a GPU: its arguments, its tables and its JSON.

Measuring needs a GPU (tests/experiments/test_task_gpu.py); what is reported from the figures is
checked here on a report of the shape ``run`` returns.
"""

from __future__ import annotations

import json
import math

import pytest

from kernelswarm.experiments.benchmarks.baselines import (
    _arguments,
    _finite,
    builtin_tasks,
    render_markdown,
)


def _timed(us: float, error: str = "") -> dict:
    return {"median_us": us, "iqr_us": 0.1, "samples": 10, "mode": "graph", "error": error}


def _report() -> dict:
    shape = {"shape": "cols=4096,dtype=bfloat16,rows=16", "dtype": "bfloat16",
             "roofline_us": 0.2, "eager": _timed(8.0), "compiled": _timed(math.nan, "Boom: x"),
             "start": _timed(4.0), "start_check": "ok", "compile_first_call_s": 9.5}
    wrong = {**shape, "shape": "cols=4096,dtype=bfloat16,rows=1",
             "start_check": "output 0 at index [0, 1]: got 1.0, expected 0.5"}
    return {
        "measured_at": "2026-11-22 14:00 UTC",
        "machine": {"device": "cuda: NVIDIA H100 80GB HBM3", "copy_bandwidth_gbs": 3000.0,
                    "peak_gflops": 700000.0, "matmul": "bf16 8192x8192x8192",
                    "gpu": {"driver": "580.65"}},
        "versions": {"torch": "2.11.0", "triton": "3.6.0"},
        "timing": {"flush_bytes": 100 * 2 ** 20, "warmup": 3, "min_repeats": 10,
                   "max_repeats": 200, "target_rel_se": 0.005, "timing_budget_s": 0.2,
                   "cuda_graph_below_us": 20.0},
        "tasks": {
            "softmax": {"task": "softmax", "entry": "softmax_bf16", "knobs": {"BLOCK": 256},
                        "build_s": 0.3, "compile_s": {"bfloat16": 19.0},
                        "shapes": [shape, wrong], "error": None},
            "gemm": {"task": "gemm", "error": "RuntimeError: out of memory"},
        },
    }


def test_markdown_has_the_machine_a_table_per_task_and_each_failure():
    text = render_markdown(_report())
    assert "cuda: NVIDIA H100 80GB HBM3, driver 580.65" in text
    assert "3,000 GB/s" in text and "700 TFLOP/s" in text
    rows = [line for line in text.splitlines() if line.startswith("| cols=")]
    # roofline 0.2 us against 8 us eager and 4 us for the starting kernel: 2.5% and 5%
    assert rows[0].split(" | ")[1:] == ["0.20", "8.00", "2.5%", "error", "—", "4.00", "5%",
                                        "ok |"]
    assert "**output 0 at index [0, 1]" in rows[1]
    assert "- cols=4096,dtype=bfloat16,rows=16 compile: Boom: x" in text
    assert "### gemm\n\nFailed: `RuntimeError: out of memory`" in text
    assert "`torch.compile` first calls: bfloat16 19.0 s" in text


def test_json_has_no_nan():
    text = json.dumps(_finite(_report()), allow_nan=False)
    assert json.loads(text)["tasks"]["softmax"]["shapes"][0]["compiled"]["median_us"] is None


def test_tasks_default_to_the_builtin_suite_and_unknown_ones_are_refused(capsys):
    args = _arguments([])
    assert [p.name for p in args.task_paths] == builtin_tasks()
    assert {"fused_add_rmsnorm", "gemm", "merge_attn_states_lse", "softmax"} <= set(
        builtin_tasks())
    with pytest.raises(SystemExit):
        _arguments(["--tasks", "softmax,no_such_task"])
    assert "'no_such_task' is neither a built-in task" in capsys.readouterr().err


class _FakeBench:
    """Stands in for the GPU bench: softmax measures one shape, gemm fails after one."""

    def __init__(self, settings):
        from kernelswarm.evaluators.machine import MachineFigures

        self.machine = MachineFigures("cuda: fake", 1 << 20, 3000.0, 700000.0,
                                      matmul="bf16 8192x8192x8192")
        self.flusher = type("Flusher", (), {"nbytes": 2 << 20})()

    def task(self, path, max_shapes, on_shape):
        from kernelswarm.evaluators.baseline_timing import ShapeBaseline, TaskBaseline, Timed

        shape = ShapeBaseline("rows=1", "bfloat16", 1.0, Timed(4.0), Timed(3.0), Timed(8.0),
                              "ok", 12.0)
        on_shape(shape)
        if path.name == "gemm":
            raise RuntimeError("CUDA error: out of memory")
        return TaskBaseline(path.name, "k_bf16", {"BLOCK": 256}, 0.2, [shape])


def test_a_failing_task_is_reported_and_the_others_are_measured(monkeypatch, tmp_path):
    from kernelswarm.evaluators import baseline_timing
    from kernelswarm.experiments.benchmarks import baselines

    monkeypatch.setattr(baseline_timing, "BaselineBench", _FakeBench)
    monkeypatch.setattr(baseline_timing, "versions", lambda: {"torch": "x"})
    out, markdown = tmp_path / "b.json", tmp_path / "b.md"
    code = baselines.main(["--tasks", "gemm,softmax", "--out", str(out),
                           "--markdown", str(markdown)])
    assert code == 0
    report = json.loads(out.read_text())
    assert report["tasks"]["gemm"]["error"] == "RuntimeError: CUDA error: out of memory"
    assert len(report["tasks"]["gemm"]["shapes_before_error"]) == 1
    softmax = report["tasks"]["softmax"]
    assert softmax["error"] is None and softmax["compile_s"] == {"bfloat16": 12.0}
    assert softmax["shapes"][0]["start"]["median_us"] == 8.0
    text = markdown.read_text()
    assert "Failed: `RuntimeError: CUDA error: out of memory`" in text
    assert "| rows=1 | 1.00 | 4.00 | 25% | 3.00 | 33% | 8.00 | 12% | ok |" in text
