"""Baselines of the task suite: ``python -m kernelswarm.experiments.benchmarks.baselines``.

Per task and ``cuda`` tuning shape, on the first GPU: PyTorch eager (the task's reference),
``torch.compile`` of the reference (once per task and dtype, ``dynamic=True``; the seconds of its
first calls reported apart), the starting ``cuda`` kernel (built and launched as the evaluator
does, and checked against the reference), and the roofline time from the task's
``roofline(shape)`` with the machine's measured copy bandwidth and bf16 matmul throughput, with
each time's fraction of it. How the times are taken: evaluators/baseline_timing.py.

Prints a table per task as it finishes, and writes every figure as JSON (``--out``) and the
tables as markdown (``--markdown``, the body of docs/baselines.md). A task that fails is reported
with its error and the others go on.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kernelswarm.evaluators import EvaluatorSettings

# The built-in tasks, found here rather than through the configuration schema, so that the GPU
# machine needs no more than the evaluators do.
BUILTIN_TASKS = Path(__file__).resolve().parents[1] / "tasks"

COLUMNS = ("shape", "roofline µs", "eager µs", "eager RL", "compile µs", "compile RL",
           "start µs", "start RL", "start check")
_TIMED = (("eager", "eager"), ("compiled", "compile"), ("start", "start"))


def builtin_tasks() -> list[str]:
    """The names of the built-in tasks, in order."""
    return sorted(p.name for p in BUILTIN_TASKS.iterdir() if (p / "task.py").is_file())


def task_path(name: str) -> Path:
    """A built-in task by name, or a task folder by path; ``ValueError`` for neither."""
    given = Path(name).expanduser()
    if (given / "task.py").is_file():
        return given
    if (BUILTIN_TASKS / name / "task.py").is_file():
        return BUILTIN_TASKS / name
    raise ValueError(f"--tasks: {name!r} is neither a built-in task ({', '.join(builtin_tasks())}) "
                     f"nor a folder holding a task.py")


def _us(value: Any) -> str:
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return "—"
    if value < 10:
        return f"{value:.2f}"
    return f"{value:.1f}" if value < 1000 else f"{value:,.0f}"


def _fraction(roofline_us: Any, timed: dict[str, Any]) -> str:
    measured = timed.get("median_us")
    if not isinstance(measured, (int, float)) or not measured > 0 \
            or not isinstance(roofline_us, (int, float)) or not math.isfinite(roofline_us):
        return "—"
    percent = 100 * roofline_us / measured
    return f"{percent:.0f}%" if percent >= 10 else f"{percent:.2g}%"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def task_table(task: dict[str, Any]) -> list[str]:
    """Markdown lines for one task's result (or its error)."""
    lines = [f"### {task['task']}", ""]
    if task.get("error"):
        return lines + [f"Failed: `{_cell(task['error'])}`", ""]
    knobs = ", ".join(f"{k}={v}" for k, v in task["knobs"].items()) or "no knobs"
    compiles = ", ".join(f"{dtype} {s:.1f} s" for dtype, s in task["compile_s"].items())
    lines += [f"Starting kernel `{task['entry']}` ({knobs}), built in {task['build_s']:.2f} s; "
              f"`torch.compile` first calls: {compiles or 'none'}.", "",
              "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for s in task["shapes"]:
        cells = [s["shape"], _us(s["roofline_us"])]
        for key, _ in _TIMED:
            timed = s[key]
            cells += [_us(timed["median_us"]) if not timed["error"] else "error",
                      _fraction(s["roofline_us"], timed)]
        cells.append(s["start_check"] if s["start_check"] == "ok" else "**" + s["start_check"]
                     + "**")
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    errors = [f"- {s['shape']} {label}: {s[key]['error']}" for s in task["shapes"]
              for key, label in _TIMED if s[key]["error"]]
    return lines + ([""] + errors if errors else []) + [""]


def render_markdown(report: dict[str, Any]) -> str:
    """The whole report as markdown: the measuring machine, the method, a table per task."""
    machine, versions, timing = report["machine"], report["versions"], report["timing"]
    software = ", ".join(f"{k} {v}" for k, v in versions.items())
    driver = machine.get("gpu", {}).get("driver")
    lines = [
        f"Measured {report['measured_at']} on {machine['device']}"
        + (f", driver {driver}" if driver else "") + f"; {software}.", "",
        f"Roofline: copy bandwidth {machine['copy_bandwidth_gbs']:,.0f} GB/s (device-to-device, "
        f"bytes read + written), matmul {machine['peak_gflops'] / 1e3:,.0f} TFLOP/s "
        f"({machine['matmul']}); ideal time = max(bytes / bandwidth, flops / matmul rate). "
        f"RL: roofline time / measured time.", "",
        f"Timing: CUDA events, L2 flushed (a pass over {timing['flush_bytes'] / 2 ** 20:.0f} "
        f"MiB) before each sample, fresh input copies, warm-up {timing['warmup']}, "
        f"median of {timing['min_repeats']} to {timing['max_repeats']} samples (until the "
        f"standard error is {100 * timing['target_rel_se']:g}% of the median or "
        f"{timing['timing_budget_s']:g} s are spent); calls under "
        f"{timing['cuda_graph_below_us']:g} µs timed as CUDA-graph replays of many calls.", ""]
    for task in report["tasks"].values():
        lines += task_table(task)
    return "\n".join(lines)


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinities as None, so that the JSON is standard."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m kernelswarm.experiments.benchmarks.baselines",
        description="PyTorch eager, torch.compile and the starting cuda kernel against the "
                    "roofline, per task and cuda tuning shape.")
    parser.add_argument("--tasks", default=",".join(builtin_tasks()),
                        help="comma-separated built-in task names or task folders "
                             "(default: every built-in task)")
    parser.add_argument("--out", type=Path, help="write every figure as JSON here")
    parser.add_argument("--markdown", type=Path, help="write the tables as markdown here")
    parser.add_argument("--device", default="cuda", help="the CUDA device (default: cuda)")
    parser.add_argument("--budget-s", type=float, default=0.2,
                        help="timing budget per function and shape, seconds (default: 0.2)")
    parser.add_argument("--max-shapes", type=int, default=None,
                        help="only the first N tuning shapes of each task (a quick run)")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="the compile cache (default: the evaluator's)")
    args = parser.parse_args(argv)
    try:
        args.task_paths = [task_path(n.strip()) for n in args.tasks.split(",") if n.strip()]
    except ValueError as exc:
        parser.error(str(exc))
    if not args.task_paths:
        parser.error("--tasks names no task")
    return args


def _settings(args: argparse.Namespace) -> EvaluatorSettings:
    extra = {"cache_dir": args.cache_dir} if args.cache_dir is not None else {}
    return EvaluatorSettings(device=args.device, timing_budget_s=args.budget_s, **extra)


def write(report: dict[str, Any], out: Path | None, markdown: Path | None) -> None:
    """The report as JSON to ``out`` and as markdown to ``markdown`` (each when given)."""
    for path, text in ((out, lambda: json.dumps(_finite(report), indent=2)),
                       (markdown, lambda: render_markdown(report))):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text() + "\n")


def _measure_task(bench: Any, path: Path, max_shapes: int | None) -> dict[str, Any]:
    """One task's report entry: its shapes, or its error and the shapes measured before it."""
    print(f"{path.name}: measuring ...", file=sys.stderr, flush=True)
    measured: list[Any] = []

    def progress(shape: Any) -> None:
        measured.append(shape)
        print(f"  {shape.shape}: eager {_us(shape.eager.median_us)} µs, compile "
              f"{_us(shape.compiled.median_us)} µs, start {_us(shape.start.median_us)} µs",
              file=sys.stderr, flush=True)

    try:
        found = bench.task(path, max_shapes, on_shape=progress)
    except Exception as exc:  # one task's failure must not stop the others
        traceback.print_exc(file=sys.stderr)
        return {"task": path.name, "error": f"{type(exc).__name__}: {exc}",
                "shapes_before_error": [asdict(s) for s in measured]}
    return {**asdict(found), "compile_s": found.compile_s, "error": None}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure every task of ``args``; one task's failure is recorded and the others go on.
    The files are rewritten after each task, so a run cut short keeps what it measured."""
    from kernelswarm.evaluators.baseline_timing import BaselineBench, versions

    settings = _settings(args)
    began = time.perf_counter()
    bench = BaselineBench(settings)
    report: dict[str, Any] = {
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": bench.machine.as_metrics(), "versions": versions(),
        "timing": {"flush_bytes": bench.flusher.nbytes, "warmup": settings.warmup,
                   "min_repeats": settings.min_repeats, "max_repeats": settings.max_repeats,
                   "target_rel_se": settings.target_rel_se,
                   "timing_budget_s": settings.timing_budget_s,
                   "cuda_graph_below_us": settings.cuda_graph_below_us},
        "tasks": {}}
    header = render_markdown(report)
    print(header, flush=True)
    for path in args.task_paths:
        started = time.perf_counter()
        entry = _measure_task(bench, path, args.max_shapes)
        entry["wall_s"] = time.perf_counter() - started
        report["tasks"][entry["task"]] = entry
        print("\n".join(task_table(entry)), flush=True)
        write(report, args.out, args.markdown)
    report["wall_s"] = time.perf_counter() - began
    write(report, args.out, args.markdown)
    print(f"all tasks: {report['wall_s']:.0f} s", file=sys.stderr)
    return report


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    report = run(args)
    failed = [name for name, task in report["tasks"].items() if task.get("error")]
    return 1 if failed and len(failed) == len(report["tasks"]) else 0


if __name__ == "__main__":
    sys.exit(main())
