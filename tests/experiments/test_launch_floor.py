"""The launch-floor benchmark without a GPU: it refuses to run, saying why; its arguments; the
repeats' bookkeeping and the table (gap over the fastest, spread, errors) from synthetic figures;
its empty kernels pass the candidates' screens, build as candidates and run under Triton's
interpreter. (Timing them needs a GPU: python -m benchmarks.launch_floor.)
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from benchmarks import launch_floor
from benchmarks.launch_floor import arguments, main, render, spread
from kernelswarm.evaluators.baselines.baseline_worker import COMPILE_MODES
from kernelswarm.evaluators.languages import CudaLanguage, TritonLanguage
from kernelswarm.evaluators.languages.screen import screen


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine "
                                                      "without a GPU")
def test_without_a_gpu_it_exits_2_and_says_why(capsys):
    assert main(["--repeats", "3"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no table, not even a header
    assert captured.err.startswith("launch_floor: no CUDA GPU can be used (")
    assert "run it on a machine with one" in captured.err


def test_arguments_default_to_the_baselines_compile_modes_and_refuse_what_cannot_run(capsys):
    args = arguments([])
    assert (args.repeats, args.json) == (15, None)
    assert args.compile_modes == list(COMPILE_MODES) and not args.no_inductor_start
    args = arguments(["--repeats", "4", "--json", "out dir/lf.json", "--compile-modes",
                      "default", "--no-inductor-start"])
    assert (args.repeats, args.json) == (4, Path("out dir/lf.json"))
    assert args.compile_modes == ["default"] and args.no_inductor_start
    assert args.command.endswith("launch_floor --repeats 4 --json 'out dir/lf.json' "
                                 "--compile-modes default --no-inductor-start")
    for argv, needle in ((["--repeats", "0"], "--repeats must be at least 1, got 0"),
                         (["--compile-modes", "reduce-overhead"], "invalid choice")):
        with pytest.raises(SystemExit) as exit_:
            arguments(argv)
        assert exit_.value.code == 2
        assert needle in capsys.readouterr().err


def test_spread_is_the_median_and_5th_to_95th_percentiles():
    assert spread([float(v) for v in range(21, 0, -1)]) == (11.0, 2.0, 20.0)
    assert spread([3.5]) == (3.5, 3.5, 3.5)
    assert spread([]) == (None, None, None)


def _report(rows: list[dict]) -> dict:
    return {"device": "cuda: NVIDIA H100 80GB HBM3", "command": "python -m x --repeats 5",
            "versions": {"torch": "2.11.0", "triton": "3.6.0"}, "repeats": 5,
            "timing": {"cuda_graph_below_us": 1000.0}, "rows": rows}


def _row(name: str, median: float | None, p5: float | None = None, p95: float | None = None,
         mode: str = "graph", error: str = "") -> dict:
    return {"callable": name, "median_us": median, "p5_us": p5, "p95_us": p95, "mode": mode,
            "host_median_us": None if median is None else 10 * median, "error": error}


def test_the_table_gives_each_path_its_gap_over_the_fastest_and_says_what_failed():
    text = render(_report([
        _row("triton: empty kernel, 1 pointer", 2.5, 2.25, 3.0),
        _row("cuda: empty kernel, 1 pointer", 2.0, 1.9, 2.1),
        _row("torch.compile (default): x + 1, 1 element", 3.0, 2.8, 3.5, mode="events/graph"),
        _row("triton: Inductor's silu_and_mul kernel, launch_triton", None, mode="",
             error="GenerationError: torch.compile fails on the reference")]))
    assert text.startswith("Launch floor on cuda: NVIDIA H100 80GB HBM3; torch 2.11.0, "
                           "triton 3.6.0.")
    assert "Command: `python -m x --repeats 5`" in text and "5 runs interleaved" in text
    assert "calls under 1000 µs timed as CUDA-graph replays" in text
    lines = text.splitlines()
    head = lines.index("| callable | mode | median µs | p5–p95 µs | gap over fastest | "
                       "host µs/call |")
    rows = [line.strip("|").split(" | ") for line in lines[head + 2:head + 6]]
    assert [r[0].strip() for r in rows] == [
        "triton: empty kernel, 1 pointer", "cuda: empty kernel, 1 pointer",
        "torch.compile (default): x + 1, 1 element",
        "triton: Inductor's silu_and_mul kernel, launch_triton"]  # the paths' order, kept
    gaps = [r[4] for r in rows]
    assert gaps == ["+0.50 µs (1.25x)", "fastest", "+1.00 µs (1.50x)", "—"]
    assert [r[1] for r in rows] == ["graph", "graph", "events/graph", "—"]
    assert [r[2] for r in rows] == ["2.50", "2.00", "3.00", "—"]
    assert [r[3] for r in rows] == ["2.25–3.00", "1.90–2.10", "2.80–3.50", "—"]
    assert [r[5].strip() for r in rows] == ["25.00", "20.00", "30.00", "—"]
    assert lines[-1] == ("- triton: Inductor's silu_and_mul kernel, launch_triton: "
                         "GenerationError: torch.compile fails on the reference")


def test_with_nothing_timed_every_gap_is_a_dash():
    text = render(_report([_row("cuda: empty kernel, 1 pointer", None, mode="",
                                error="RuntimeError: NVRTC is not installed")]))
    row = next(line for line in text.splitlines() if line.startswith("| cuda"))
    assert row == "| cuda: empty kernel, 1 pointer | — | — | — | — | — |"


def test_repeats_rotate_over_the_paths_and_a_failing_one_keeps_its_error(monkeypatch):
    order: list[str] = []

    def time_once(bench, call, copies):
        name = call(0)
        order.append(name)
        if name == "flaky" and order.count("flaky") == 2:
            raise RuntimeError("CUDA error: an illegal memory access\nmore lines")
        return {"fast": 2.0, "slow": 5.0, "flaky": 4.0}[name], "graph"

    monkeypatch.setattr(launch_floor, "time_once", time_once)
    monkeypatch.setattr(launch_floor, "host_us", lambda bench, call, copies: 7.0)
    bench = SimpleNamespace(seconds=lambda fn: (fn(), 0.5)[1])
    paths = [launch_floor._launch(bench, name, lambda name=name: lambda i: name)
             for name in ("fast", "slow", "flaky")]
    paths.append(launch_floor._launch(bench, "broken", lambda: 1 / 0))
    rows = launch_floor.measure(bench, paths, SimpleNamespace(copies=4), repeats=3)
    # each round starts one path further on; the failed one is not timed again
    assert order == ["fast", "slow", "flaky", "slow", "flaky", "fast", "fast", "slow"]
    fast, slow, flaky, broken = rows
    assert fast["medians_us"] == [2.0] * 3 and slow["medians_us"] == [5.0] * 3
    assert fast["first_call_s"] == 0.5 and fast["host_median_us"] == 7.0
    assert (fast["gap_us"], slow["gap_us"], slow["gap_x"]) == (0.0, 3.0, 2.5)
    assert flaky["medians_us"] == [4.0] and flaky["error"] == (
        "RuntimeError: CUDA error: an illegal memory access")
    assert broken["error"] == "ZeroDivisionError: division by zero"
    assert broken["median_us"] is None and broken["gap_us"] is None and broken["mode"] == ""


def test_the_empty_kernels_pass_the_screens_candidates_pass():
    assert screen(launch_floor.TRITON_SOURCE, TritonLanguage.screen_rules) is None
    assert screen(launch_floor.CUDA_SOURCE, CudaLanguage.screen_rules) is None


@pytest.mark.skipif(importlib.util.find_spec("cuda") is None
                    or importlib.util.find_spec("cuda.core") is None,
                    reason="NVRTC through cuda.core is not installed (pip install cuda-core "
                           "cuda-bindings nvidia-cuda-nvrtc)")
def test_the_empty_cuda_kernels_build_as_a_candidate_with_launch_cudas_kernel(tmp_path):
    from kernelswarm.evaluators.languages.compile_cache import CompileCache
    from kernelswarm.evaluators.languages.nvrtc import read_artifact
    from kernelswarm.evaluators.settings import EvaluatorSettings
    from kernelswarm.search.candidate import Candidate

    settings = EvaluatorSettings(device="cuda", cuda_arch="sm_90", cache_dir=tmp_path)
    candidate = Candidate.create(language="cuda", source=launch_floor.CUDA_SOURCE, entry="empty")
    build = CompileCache(tmp_path).build(CudaLanguage.from_settings(settings), candidate, 120.0)
    assert build.artifact is not None, build.result.log
    header, _ = read_artifact(build.artifact)
    assert set(header["kernels"]) == {"empty", "silu_and_mul_bf16"}  # the one launch_cuda picks


_RUN_UNDER_THE_INTERPRETER = """
import sys
from kernelswarm.evaluators.settings import EvaluatorSettings
from benchmarks import launch_floor as lf
from benchmarks.baselines import task_path
from kernelswarm.search.task import load_task

settings = EvaluatorSettings(device="cpu", cache_dir=sys.argv[1])
task = load_task(task_path("silu_and_mul"), "cpu")
inputs = task.module.make_inputs(lf.SHAPE, 0, "cpu")
outputs = task.module.make_outputs(lf.SHAPE, "cpu")
one = lf.load_kernel(settings, "triton", lf.TRITON_SOURCE, "empty")
one(inputs[0].new_zeros(1))
silu = lf.load_kernel(settings, "triton", lf.TRITON_SOURCE, "silu_and_mul", {"BLOCK": (1024,)})
task.module.launch_triton(silu, inputs, outputs, dict(lf.SHAPE))
print("launched", silu.keywords)
"""


def test_the_empty_triton_kernels_load_as_candidates_and_launch_under_the_interpreter(tmp_path):
    # a process of its own: Triton's interpreter is chosen when triton is first imported
    done = subprocess.run([sys.executable, "-c", _RUN_UNDER_THE_INTERPRETER, str(tmp_path)],
                          env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "launched {'BLOCK': 1024}"
    assert len(list(tmp_path.glob("*.py"))) == 2  # two candidates: the knobs differ
