"""The baselines benchmark on the CPU: a table per task that states its device, versions and
command, one row per shape with each baseline's time and the best named, and every skip and
failure said; its JSON has no NaN. (On a GPU it adds the starting kernel and the roofline:
tests/experiments/test_task_gpu.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.baselines import _arguments, builtin_tasks, main
from tests.evaluators.test_baselines import _task


def test_a_table_per_task_with_device_versions_command_and_skips(tmp_path, capsys):
    good = _task(tmp_path / "axpy", (4096, 65536))
    broken = tmp_path / "broken"
    _task(broken, (4096,), anchors=False)
    (broken / "task.py").write_text((broken / "task.py").read_text().replace(
        "    return (ALPHA * x + y,)", "    raise RuntimeError('reference is broken')"))
    out, markdown = tmp_path / "b.json", tmp_path / "b.md"
    code = main(["--device", "cpu", "--no-flush", "--budget-s", "0.05",
                 "--cache-dir", str(tmp_path / "cache"), "--tasks", f"{broken},{good}",
                 "--out", str(out), "--markdown", str(markdown)])
    assert code == 0  # one task failed, the other was measured
    text = markdown.read_text()
    assert capsys.readouterr().out.strip().endswith(text.strip().splitlines()[-1])
    assert "on cpu: " in text and "torch 2." in text and "no-such-library not installed" in text
    assert "Command: `python -m benchmarks.baselines --device cpu" in text
    assert "warm cache (no flush)" in text
    assert "Failed: `BaselineError: the baseline worker failed" in text
    rows = [line for line in text.splitlines() if line.startswith("| dtype=float32,n=")]
    assert len(rows) == 2
    header = next(line for line in text.splitlines() if line.startswith("| shape |"))
    assert header == "| shape | eager µs | fused µs | wrong µs | best | compile s |"
    for row in rows:
        cells = row.strip("|").split(" | ")
        assert "±" in cells[1] and "±" in cells[2] and cells[3] == "incorrect"
        assert cells[4].strip() in ("eager", "fused")
    assert "- missing skipped: not installed (no-such-library)" in text
    assert "- gpu_only skipped: runs on cuda only" in text
    assert "compile skipped: not measured on cpu" in text
    report = json.loads(out.read_text())  # standard JSON: no NaN
    assert report["tasks"]["axpy"]["shapes"]["dtype=float32,n=4096"]["eager"]["samples"] >= 10


def test_tasks_default_to_the_builtin_suite_and_unknown_ones_are_refused(capsys):
    args = _arguments([])
    assert [p.name for p in args.task_paths] == builtin_tasks()
    assert {"fused_add_rmsnorm", "gemm", "merge_attn_states_lse", "softmax"} <= set(
        builtin_tasks())
    with pytest.raises(SystemExit):
        _arguments(["--tasks", "softmax,no_such_task"])
    assert "'no_such_task' is neither a built-in task" in capsys.readouterr().err


def test_every_builtin_gpu_task_names_its_library_anchors():
    from kernelswarm.search import load_task

    root = Path(__file__).resolve().parents[2] / "experiments" / "tasks"
    expected = {"silu_and_mul": {"liger", "flashinfer", "sgl-kernel"},
                "fused_add_rmsnorm": {"liger", "flashinfer", "sgl-kernel"},
                "merge_attn_states_lse": {"flashinfer", "sgl-kernel"}}
    for name, anchors in expected.items():
        module = load_task(root / name, "cuda").module
        assert set(module.ANCHORS) == anchors
        for anchor in module.ANCHORS.values():
            assert callable(getattr(module, anchor["call"])) and anchor["devices"] == ["cuda"]


def test_starts_names_gpu_languages_and_tasks_without_one_say_so(capsys):
    from benchmarks.baselines import start_kernels, task_path

    args = _arguments(["--tasks", "gemm", "--starts", "cute, triton"])
    assert args.start_languages == ["cute", "triton"]
    with pytest.raises(SystemExit):
        _arguments(["--starts", "cpp"])
    assert "--starts: cpp are not kernel languages that run on a GPU" in capsys.readouterr().err
    found, missing = start_kernels(task_path("gemm"), ["cute", "triton"])
    assert list(found) == ["cute start"] and found["cute start"].language == "cute"
    assert missing == {"triton": "the task has no triton starting kernel"}


def test_other_kernels_get_columns_against_the_best_baseline_and_a_geomean_line():
    from benchmarks.baselines import task_table

    def timed(us):
        return {"median_us": us, "iqr_us": 0.1, "samples": 10, "mode": "graph", "error": None}

    shapes = ["n=1", "n=2"]
    task = {"task": "t", "error": None, "baseline_names": ["eager"], "skipped": {},
            "starts_missing": {"triton": "the task has no triton starting kernel"},
            "shapes": {s: {"eager": timed(10.0)} for s in shapes},
            "best": {"n=1": ("eager", 10.0), "n=2": ("eager", 10.0)},
            "start": {"entry": "k", "knobs": {}, "build_s": 0.1, "shapes": [
                {"shape": s, "roofline_us": 5.0, "start": timed(20.0), "start_check": "ok",
                 "kernels": {"cute start": timed(us)}, "kernel_checks": {"cute start": "ok"}}
                for s, us in zip(shapes, (8.0, 12.5), strict=True)]}}
    text = "\n".join(task_table(task))
    assert "| cute start µs | cute start vs best | cute start check |" in text
    assert "| 8.00 ±0.10 | 1.250x | ok |" in text and "| 12.5 ±0.10 | 0.800x | ok |" in text
    assert "- cute start: 1.000x the best baseline (geometric mean over 2 shapes), worst " \
           "0.800x at n=2" in text
    assert "- triton start skipped: the task has no triton starting kernel" in text
