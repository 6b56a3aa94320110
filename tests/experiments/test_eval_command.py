"""``kernelswarm eval``: one kernel file judged against a task, as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelswarm.experiments.commands.cli import main
from tests.conftest import ROOT, SILU_TASK

KERNELS = ROOT / "tests" / "evaluators" / "kernels"


def _eval(args: list[str], cache: Path, cwd: Path, **env_vars: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "KERNELSWARM_CACHE": str(cache), **env_vars}
    return subprocess.run([sys.executable, "-m", "kernelswarm.experiments.commands.cli", "eval",
                           *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_starting_kernel_is_ok_and_its_table_printed(compile_cache, tmp_path):
    done = _eval(["silu_and_mul", str(SILU_TASK / "silu_and_mul.cpp")], compile_cache, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "silu_and_mul · cpp · cpu: " in done.stdout
    for header in ("shape", "max err", "IQR µs", "× start", "best baseline", "× best", "× eager",
                   "roofline"):
        assert header in done.stdout
    for label in ("d=4096, tokens=1", "d=4096, tokens=16", "d=2048, tokens=64"):
        assert label in done.stdout
    assert "OK correct on 3 tuning shapes" in done.stdout
    assert "vs the starting kernel" in done.stdout and "vs PyTorch" in done.stdout


def test_the_table_fits_the_width_columns_asks_for_dropping_columns_not_letters(
        compile_cache, tmp_path):
    done = _eval(["silu_and_mul", str(SILU_TASK / "silu_and_mul.cpp")], compile_cache, tmp_path,
                 COLUMNS="80")
    assert done.returncode == 0, done.stdout + done.stderr
    assert max(len(line) for line in done.stdout.splitlines()) <= 80
    assert "…" not in done.stdout
    for label in ("d=4096, tokens=1", "d=4096, tokens=16", "d=2048, tokens=64"):
        assert label in done.stdout
    assert "× best" in done.stdout and "IQR µs" not in done.stdout  # the spread went first


def test_a_broken_kernel_exits_1_with_its_status(compile_cache, tmp_path):
    done = _eval(["silu_and_mul", str(KERNELS / "compile_error.cpp")], compile_cache, tmp_path)
    assert done.returncode == 1
    assert "COMPILE_ERROR" in done.stdout and "fast_silu" in done.stdout
    # The user's file at its own line, the source line whole ("gate[i]": no markup eats it),
    # and no empty table above the verdict.
    assert f"{KERNELS / 'compile_error.cpp'}:9:30: error" in done.stdout
    assert "kernel.cpp" not in done.stdout
    assert "fast_silu(gate[i]) * gate[d + i]" in done.stdout
    assert "max err" not in done.stdout


def test_json_output_parses_and_carries_the_verdict(compile_cache, tmp_path):
    done = _eval([str(SILU_TASK), str(KERNELS / "compile_error.cpp"), "--json"], compile_cache,
                 tmp_path)
    assert done.returncode == 1
    doc = json.loads(done.stdout)
    assert doc["status"] == "COMPILE_ERROR" and doc["language"] == "cpp"
    assert doc["task"] == "silu_and_mul" and doc["shapes"] == []
    assert "fast_silu" in doc["message"] and doc["speedup_vs_start"] == 0.0


@pytest.mark.parametrize("args, message", [
    (["no_such_task", "kernel.cpp"], "'no_such_task' is neither a built-in task"),
    (["silu_and_mul", "missing.cpp"], "CANDIDATE_FILE 'missing.cpp' is not a file"),
    (["silu_and_mul", "kernel.txt"], "cannot tell the language of 'kernel.txt'"),
    (["silu_and_mul", "kernel.cu", "--device", "cpu"], "cannot run language 'cuda'"),
])
def test_unusable_arguments_exit_2_naming_what_is_wrong(args, message, tmp_path, capsys,
                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("kernel.cpp", "kernel.txt", "kernel.cu"):
        (tmp_path / name).write_text("// not a kernel\n")
    assert main(["eval", *args]) == 2
    assert message in " ".join(capsys.readouterr().err.split())


def test_a_language_the_task_has_no_starting_kernel_in_exits_2(silu_task_copy, tmp_path,
                                                               capsys):
    task_py = silu_task_copy / "task.py"
    task_py.write_text(task_py.read_text() + '\ndel KERNELS["triton"]\n')
    kernel = tmp_path / "kernel.py"
    kernel.write_text("def silu_and_mul(out, x, tokens, d):\n    pass\n")
    assert main(["eval", str(silu_task_copy), str(kernel), "--device", "cpu"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "has no starting kernel in 'triton'" in err and "it has: cpp, " in err


def test_an_unknown_language_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", "silu_and_mul", "kernel.f90", "--language", "fortran"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'fortran'" in capsys.readouterr().err


def test_the_roofline_is_stated_against_the_bound_of_the_shapes_regime(tmp_path):
    """A warm cache serves a small shape from the last-level cache, faster than the memory
    roofline allows: eval says "in cache" there instead of a fraction above 100%."""
    import io

    from rich.console import Console

    from kernelswarm.experiments.authoring.task_folders import scaffold_task
    from kernelswarm.experiments.evaluation.judge_file import roofline_bounds
    from kernelswarm.experiments.views.evaluation_view import evaluation_table
    from kernelswarm.search import Evaluation, ShapeResult, Status, load_task
    from kernelswarm.search.measured import MachineFigures

    task = load_task(scaffold_task("my_op", tmp_path), "cpu")
    moved = [task.roofline(s)[0] for s in task.tuning_shapes]
    machine = MachineFigures(device="cpu", copy_bandwidth_gbs=10.0, peak_gflops=50.0,
                             llc_bytes=int(sorted(moved)[1]))  # the two smaller shapes fit
    shapes = tuple(ShapeResult(s.label, correct=True, time_us=1.0, roofline_fraction=1.447)
                   for s in task.tuning_shapes)
    evaluation = Evaluation("c", Status.OK, "ok", shapes=shapes, machine=machine)
    cold = roofline_bounds(task, evaluation, flushed=True)
    warm = roofline_bounds(task, evaluation, flushed=False)
    assert set(cold.values()) == {"memory"}  # an elementwise op: bandwidth bound
    assert sorted(warm.values()) == ["cache", "cache", "memory"]
    console = Console(file=io.StringIO(), width=200)
    console.print(evaluation_table(evaluation, "my_op", "cpp", "warm cache", warm))
    text = console.file.getvalue()
    assert text.count("in cache") == 3  # two shapes and the caption saying why
    assert text.count("144.7%") == 1  # the shape beyond the cache keeps its figure
