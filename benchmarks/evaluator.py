"""Benchmark of the GPU evaluator: ``python -m benchmarks.evaluator``.

Measures, for a task's ``cuda`` starting kernel (default: silu_and_mul) on the first GPU:

- NVRTC build time of distinct variants (the first includes starting the compiler process);
- full evaluation time of one candidate (correctness on every shape and seed, held-out shapes,
  timing interleaved with the starting kernel, profiling), built beforehand as a worker gets it;
- candidates evaluated per GPU-minute over a stream of variants;
- repeatability: the same kernel in two fresh sandbox processes, medians compared on shapes of
  at least 10 us;
- agreement of the sandbox's medians with ``triton.testing.do_bench`` on the same kernel;
- optionally (``--ncu``) one evaluation with Nsight Compute.

Prints a table and writes every figure as JSON (``--out``).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator
from kernelswarm.search import Candidate, Evaluation, Status
from kernelswarm.search.stored_form import stored_detail

TASKS = Path(__file__).resolve().parents[1] / "experiments" / "tasks"
COMPILE_TARGET_S = 0.5
RATE_TARGET_PER_MIN = 20.0
REPEAT_TARGET = 0.01
REPEAT_MIN_US = 10.0


def variants(start: Candidate, count: int, salt: str) -> list[Candidate]:
    """Distinct candidates (a comment and the knob differ), all correct and comparable."""
    blocks = list(start.space.get("BLOCK", (None,)))
    made = []
    for i in range(count):
        knobs = {"BLOCK": blocks[i % len(blocks)]} if blocks[0] is not None else {}
        made.append(start.derive(source=start.source + f"\n// {salt} variant {i}\n",
                                 knobs=knobs))
    return made


def bench_compile(task: Path, settings: EvaluatorSettings, count: int) -> dict[str, Any]:
    """NVRTC build seconds for ``count`` distinct variants in an empty cache."""
    with tempfile.TemporaryDirectory(prefix="ks-bench-cache-") as cache:
        evaluator = SandboxEvaluator(task, "cuda", replace(settings, cache_dir=Path(cache)))
        seconds = []
        for candidate in variants(evaluator.start_candidate, count, "compile"):
            result = evaluator.compile(candidate)
            if not result.ok:
                raise RuntimeError(f"a benchmark variant does not build:\n{result.log}")
            seconds.append(result.seconds)
    return {"first_s": seconds[0], "median_s": statistics.median(seconds[1:] or seconds),
            "max_s": max(seconds[1:] or seconds), "count": count}


def _evaluate_all(evaluator: SandboxEvaluator, candidates: list[Candidate]
                  ) -> tuple[list[Evaluation], list[float]]:
    for candidate in candidates:  # built first: a worker receives kernels that built
        evaluator.compile(candidate)
    evaluations, seconds = [], []
    for candidate in candidates:
        began = time.perf_counter()
        evaluations.append(evaluator.evaluate(candidate))
        seconds.append(time.perf_counter() - began)
    return evaluations, seconds


def bench_stream(task: Path, settings: EvaluatorSettings, count: int,
                 label: str) -> dict[str, Any]:
    """Evaluate a stream of prebuilt variants in one warm sandbox."""
    with SandboxEvaluator(task, "cuda", settings) as evaluator:
        began = time.perf_counter()
        first = evaluator.evaluate(evaluator.start_candidate)  # starts the sandbox
        startup_s = time.perf_counter() - began
        if first.status is not Status.OK:
            raise RuntimeError(f"the starting kernel is not OK: {first.message}")
        evaluations, seconds = _evaluate_all(
            evaluator, variants(evaluator.start_candidate, count, label))
    statuses = sorted({e.status.value for e in evaluations})
    return {"count": count, "statuses": statuses, "sandbox_start_and_first_eval_s": startup_s,
            "eval_median_s": statistics.median(seconds), "eval_max_s": max(seconds),
            "per_gpu_minute": 60.0 * count / sum(seconds), "start": first,
            "speedups": [round(e.speedup, 4) for e in evaluations]}


def bench_repeatability(task: Path, settings: EvaluatorSettings) -> dict[str, Any]:
    """The starting kernel's per-shape medians in two fresh sandbox processes."""
    runs = []
    for _ in range(2):
        with SandboxEvaluator(task, "cuda", settings) as evaluator:
            evaluation = evaluator.evaluate(evaluator.start_candidate)
            if evaluation.status is not Status.OK:
                raise RuntimeError(evaluation.message)
            runs.append({s.shape: s.time_us for s in evaluation.shapes})
    shapes = {}
    for label, first in runs[0].items():
        second = runs[1][label]
        shapes[label] = {"first_us": first, "second_us": second,
                         "rel_diff": abs(first - second) / min(first, second)}
    judged = [v["rel_diff"] for v in shapes.values()
              if min(v["first_us"], v["second_us"]) >= REPEAT_MIN_US]
    return {"shapes": shapes, "max_rel_diff_ge_10us": max(judged) if judged else None}


def bench_agreement(task: Path, settings: EvaluatorSettings, start: Evaluation) -> dict[str, Any]:
    """Our medians of the starting kernel against do_bench's on the same kernel and shapes."""
    from kernelswarm.evaluators.baselines.reference_timing import do_bench_medians

    evaluator = SandboxEvaluator(task, "cuda", settings)
    candidate = evaluator.start_candidate
    build = evaluator.cache.build(evaluator.language, candidate, settings.compile_timeout_s)
    assert build.artifact is not None
    theirs = do_bench_medians(task, "cuda", settings, build.artifact, candidate.entry,
                              candidate.spec_dict)
    shapes = {s.shape: {"ours_us": s.time_us, "do_bench_us": theirs[s.shape],
                        "ratio": s.time_us / theirs[s.shape]} for s in start.shapes}
    return {"shapes": shapes,
            "max_abs_log_ratio": max(abs(math.log(v["ratio"])) for v in shapes.values())}


def bench_ncu(task: Path, settings: EvaluatorSettings) -> dict[str, Any]:
    """One evaluation with Nsight Compute on; its metrics and the evaluation's time."""
    ncu_settings = replace(settings, ncu=True, run_timeout_s=max(settings.run_timeout_s, 300.0))
    with SandboxEvaluator(task, "cuda", ncu_settings) as evaluator:
        evaluator.evaluate(evaluator.start_candidate)
        candidate = variants(evaluator.start_candidate, 1, "ncu")[0]
        evaluation = evaluator.evaluate(candidate)
    return {"status": evaluation.status.value, "eval_s": evaluation.eval_s,
            "ncu": evaluation.profile.stored_ncu() if evaluation.profile else None}


def _row(name: str, value: str, target: str = "", ok: bool | None = None) -> str:
    verdict = "" if ok is None else ("yes" if ok else "NO")
    return f"| {name:<46} | {value:>22} | {target:>10} | {verdict:>4} |"


def table(results: dict[str, Any]) -> str:
    """The benchmark's summary as a Markdown table."""
    c, s, r = results["compile"], results["stream"], results["repeatability"]
    lines = [_row("what", "measured", "target", "met"),
             "|" + "-" * 48 + "|" + "-" * 24 + "|" + "-" * 12 + "|" + "-" * 6 + "|",
             _row("device", results["device"][:22]),
             _row("copy bandwidth (read+write)", f"{results['machine_bandwidth_gbs']:.0f} GB/s"),
             _row("bf16 matmul", f"{results['machine_tflops']:.0f} TFLOP/s"),
             _row("events timer overhead (sync round trip)",
                  f"{results['timer_overhead_us']:.1f} us"),
             _row("NVRTC build, first (starts the compiler)", f"{c['first_s']:.3f} s"),
             _row(f"NVRTC build, median of {c['count'] - 1}", f"{c['median_s']:.3f} s",
                  f"<= {COMPILE_TARGET_S}", c["median_s"] <= COMPILE_TARGET_S),
             _row("sandbox start + first evaluation", f"{s['sandbox_start_and_first_eval_s']:.2f} s"),
             _row(f"full evaluation, median of {s['count']}", f"{s['eval_median_s']:.2f} s"),
             _row("candidates per GPU-minute", f"{s['per_gpu_minute']:.1f}",
                  f">= {RATE_TARGET_PER_MIN:g}", s["per_gpu_minute"] >= RATE_TARGET_PER_MIN),
             _row("stream verdicts", ",".join(s["statuses"]))]
    if "stream_no_profile" in results:
        q = results["stream_no_profile"]
        lines.append(_row("candidates per GPU-minute, no profiler", f"{q['per_gpu_minute']:.1f}"))
    worst = r["max_rel_diff_ge_10us"]
    lines.append(_row("repeatability, 2 processes, shapes >= 10 us",
                      "n/a" if worst is None else f"max diff {100 * worst:.2f}%",
                      f"<= {100 * REPEAT_TARGET:g}%", None if worst is None
                      else worst <= REPEAT_TARGET))
    for label, shape in results["agreement"]["shapes"].items():
        lines.append(_row(f"ours/do_bench {label}"[:46],
                          f"{shape['ours_us']:.2f}/{shape['do_bench_us']:.2f} us"))
    for label, shape in r["shapes"].items():
        lines.append(_row(f"repeat {label}"[:46],
                          f"{shape['first_us']:.2f}/{shape['second_us']:.2f} us"))
    if "ncu" in results:
        lines.append(_row("evaluation with ncu", f"{results['ncu']['eval_s']:.1f} s"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.evaluator")
    parser.add_argument("--task", default=str(TASKS / "silu_and_mul"))
    parser.add_argument("--variants", type=int, default=20)
    parser.add_argument("--compiles", type=int, default=20)
    parser.add_argument("--out", default="evaluator-benchmark.json")
    parser.add_argument("--ncu", action="store_true", help="also one evaluation under ncu")
    parser.add_argument("--cache-dir", help="compile cache (default: a temporary folder)")
    args = parser.parse_args(argv)
    cache = Path(args.cache_dir or tempfile.mkdtemp(prefix="ks-bench-"))
    settings = EvaluatorSettings(device="cuda", cache_dir=cache)
    task = Path(args.task)
    results: dict[str, Any] = {"settings": {k: str(v) for k, v in vars(settings).items()}}
    results["compile"] = bench_compile(task, settings, args.compiles)
    stream = bench_stream(task, settings, args.variants, "stream")
    start: Evaluation = stream.pop("start")
    machine = start.machine
    assert machine is not None, "the starting kernel was judged: the machine was measured"
    resources, _ = stored_detail(start)
    results.update(device=start.device, machine_bandwidth_gbs=machine.copy_bandwidth_gbs,
                   machine_tflops=machine.peak_gflops / 1e3,
                   timer_overhead_us=machine.timer_overhead_us, gpu=machine.gpu,
                   start_timing=start.metrics.get("timing"), start_resources=resources,
                   start_profile=start.profile.stored_launches() if start.profile else None,
                   stream=stream)
    results["start_shapes"] = {s.shape: {"time_us": s.time_us, "iqr_us": s.time_spread_us,
                                         "samples": s.samples, "eager_us": s.eager_time_us,
                                         "roofline": s.roofline_fraction} for s in start.shapes}
    results["stream_no_profile"] = bench_stream(
        task, replace(settings, profile_kernels=False), max(5, args.variants // 2), "noprof")
    results["stream_no_profile"].pop("start")
    results["repeatability"] = bench_repeatability(task, settings)
    results["agreement"] = bench_agreement(task, settings, start)
    if args.ncu:
        results["ncu"] = bench_ncu(task, settings)
    Path(args.out).write_text(json.dumps(results, indent=2, default=str))
    print(table(results))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
