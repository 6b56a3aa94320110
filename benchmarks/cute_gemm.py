"""A CuTe gemm against cuBLAS: ``python -m benchmarks.cute_gemm``.

For each shape (default: the square 4096^3 and 8192^3 bf16 that matmul benchmarks quote; ``--all``
adds the gemm task's other tuning shapes), times ``torch.matmul`` (cuBLAS) and the gemm task's
``cute`` kernel at each knob setting asked for (``--knobs``; default: every BM x BN x STAGES of
the task's knob space), each checked against the reference first, with the evaluator's GPU timer
(L2 flushed, CUDA graphs below its threshold: evaluators/baselines/baseline_timing.py), and prints a
markdown table: microseconds (± IQR), TFLOP/s and the fraction of cuBLAS's throughput. A
candidate file (``--source``, e.g. a search's best) is timed in place of the task's kernel.

The knob settings are built in parallel, one NVRTC process each, before any timing (a CuTe MMA
kernel takes tens of seconds to compile). Writes every figure as JSON (``--json``) after each
shape, so a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shlex
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

TASK = Path(__file__).resolve().parents[1] / "experiments" / "tasks" / "gemm"
SQUARE = (4096, 8192)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cute_gemm",
                                     description=__doc__.split("\n\n")[1])
    parser.add_argument("--knobs", action="append", default=[], metavar="BM=128,BN=128,STAGES=3",
                        help="a knob setting to time (repeatable; default: the task's space)")
    parser.add_argument("--source", type=Path, help="a cute gemm file to time instead of the "
                                                    "task's kernel")
    parser.add_argument("--all", action="store_true",
                        help="every tuning shape of the gemm task, not only the square ones")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--budget-s", type=float, default=0.3,
                        help="timing budget per kernel and shape, seconds (default: 0.3)")
    parser.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1),
                        help="parallel builds (default: min(8, CPU cores))")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args(argv)
    args.command = "python -m benchmarks.cute_gemm " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    return args


def knob_settings(space: dict[str, tuple[Any, ...]], asked: list[str]) -> list[dict[str, int]]:
    """The settings of ``asked`` ("BM=128,BN=64"; unnamed knobs at their first value), or every
    combination of ``space``; ``ValueError`` names a knob or value outside the space."""
    if not asked:
        names = sorted(space)
        return [dict(zip(names, values, strict=True))
                for values in itertools.product(*(space[n] for n in names))]
    settings = []
    for text in asked:
        chosen = {name: values[0] for name, values in space.items()}
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, _, value = part.partition("=")
            if name not in space or not value.lstrip("-").isdigit() \
                    or int(value) not in space[name]:
                raise ValueError(f"--knobs {text!r}: {part!r} is not one of "
                                 f"{', '.join(f'{n} in {list(v)}' for n, v in space.items())}")
            chosen[name] = int(value)
        settings.append(chosen)
    return settings


def label(knobs: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(knobs.items()))


def _build(job: tuple[Any, Any, str, float]) -> tuple[bool, str, str, float]:
    """In a pool process: (ok, artifact path, log, seconds) of one build."""
    from kernelswarm.evaluators.languages.compile_cache import CompileCache

    language, candidate, cache_dir, timeout_s = job
    build = CompileCache(Path(cache_dir)).build(language, candidate, timeout_s)
    return build.result.ok, str(build.artifact), build.result.log, build.result.seconds


def tflops(shape: dict[str, Any], us: Any) -> float | None:
    if not isinstance(us, (int, float)) or us <= 0:
        return None
    return 2 * shape["m"] * shape["n"] * shape["k"] / (us * 1e-6) / 1e12


def run(args: argparse.Namespace) -> dict[str, Any]:
    from kernelswarm.evaluators import EvaluatorSettings
    from kernelswarm.evaluators.baselines.baseline_timing import BaselineBench, software_versions
    from kernelswarm.evaluators.baselines.baselines import device_name
    from kernelswarm.evaluators.languages import get_language
    from kernelswarm.search import load_task

    settings = EvaluatorSettings(device=args.device, timing_budget_s=args.budget_s)
    task = load_task(TASK, "cuda")
    start = task.starting_candidate("cute")
    if args.source is not None:
        start = start.derive(source=args.source.read_text())
    try:
        settings_list = knob_settings(dict(start.space), args.knobs)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    language = get_language("cute", settings)
    candidates = {label(k): start.derive(knobs=k) for k in settings_list}
    shapes = [s for s in task.tuning_shapes
              if args.all or (s["m"] == s["n"] == s["k"] and s["m"] in SQUARE)]
    report: dict[str, Any] = {
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "device": device_name(args.device), "versions": software_versions(), "command": args.command,
        "builds": {}, "shapes": {}}
    language.arch  # noqa: B018 - detected here, once, rather than in every pool process
    print(f"building {len(candidates)} knob settings, {args.jobs} at a time ...",
          file=sys.stderr, flush=True)
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        jobs = [(language, c, str(settings.cache_dir), 600.0) for c in candidates.values()]
        artifacts = {}
        for name, (ok, artifact, log, seconds) in zip(candidates, pool.map(_build, jobs),
                                                      strict=True):
            report["builds"][name] = {"ok": ok, "seconds": seconds, "log": "" if ok else log}
            if ok:
                artifacts[name] = Path(artifact)
            print(f"  {name}: {'built' if ok else 'FAILED'} in {seconds:.1f} s"
                  + ("" if ok else f"\n{log}"), file=sys.stderr, flush=True)
    loaded = {name: language.load(artifact, candidates[name].entry, candidates[name].spec_dict)
              for name, artifact in artifacts.items()}
    kernels = {name: kernel.fn for name, kernel in loaded.items()}

    matmul = task.module.launch_matmul  # cuBLAS through torch.matmul, into the output

    bench = BaselineBench(settings)
    launch = task.module.launch_cute
    print(f"{report['device']}; " + ", ".join(f"{k} {v}" for k, v in report["versions"].items())
          + f"\n\nCommand: `{args.command}`\n")
    print("| shape | kernel | µs (± IQR) | TFLOP/s | of cuBLAS |\n|---|---|---|---|---|",
          flush=True)
    for shape in shapes:
        others = {name: (fn, launch) for name, fn in kernels.items()}
        found = bench.shape(task, shape, matmul, None, others)
        base = found.start.median_us if found.start_check == "ok" else None
        row = {"cuBLAS": {"median_us": base, "iqr_us": found.start.iqr_us,
                          "tflops": tflops(shape, base), "check": found.start_check}}
        size = f"{shape['m']} x {shape['n']} x {shape['k']}"
        print(f"| {size} | torch.matmul (cuBLAS) | " + (
            f"{base:.1f} ±{found.start.iqr_us:.1f} | {tflops(shape, base):.0f} | 100% |"
            if base else f"{found.start_check} | — | — |"), flush=True)
        for name in kernels:
            timed, check = found.kernels[name], found.kernel_checks[name]
            us = timed.median_us if check == "ok" else None
            row[name] = {"median_us": us, "iqr_us": timed.iqr_us, "tflops": tflops(shape, us),
                         "of_cublas": base / us if base and us else None, "check": check}
            print(f"| {size} | cute {name} | " + (
                f"{us:.1f} ±{timed.iqr_us:.1f} | {tflops(shape, us):.0f} | "
                f"{100 * base / us:.0f}% |" if us and base else f"{check} | — | — |"),
                flush=True)
        report["shapes"][shape.label] = row
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(report, indent=2) + "\n")
    for kernel in loaded.values():
        language.unload(kernel)
    return report


def main(argv: list[str] | None = None) -> int:
    report = run(_arguments(argv))
    return 0 if report["shapes"] else 1


if __name__ == "__main__":
    sys.exit(main())
