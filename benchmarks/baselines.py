"""Baselines of the task suite: ``python -m benchmarks.baselines``.

Per task and tuning shape: the baselines a user would pick, as every speedup is taken against
them (evaluators/baselines/baselines.py, in their own process, with the candidates' timers and timing
settings): PyTorch eager, ``torch.compile`` of the reference specialised to the shape
(``dynamic=False``, the fastest of its default and ``max-autotune-no-cudagraphs`` modes, named;
the seconds of its first calls reported apart) and the library kernels the task names (Liger,
FlashInfer, sgl-kernel: each checked against the reference first, skipped with the reason where
not installed); the best of them, named. On a GPU also the starting ``cuda`` kernel (built and
launched as the evaluator does, checked, evaluators/baselines/baseline_timing.py) and the roofline time
from the task's ``roofline(shape)`` with the machine's measured copy bandwidth and bf16 matmul
throughput, with each time's fraction of it.

Prints a markdown table per task as it finishes, headed by the device, the software versions
and the command, ready to paste into docs/baselines.md; writes every figure as JSON (``--out``)
and the tables as markdown (``--markdown``). A task that fails is reported with its error and
the others go on.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kernelswarm.evaluators import EvaluatorSettings

# The built-in tasks, found here rather than through the configuration schema, so that the GPU
# machine needs no more than the evaluators do.
BUILTIN_TASKS = Path(__file__).resolve().parents[1] / "experiments" / "tasks"


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


def _fraction(roofline_us: Any, measured: Any) -> str:
    if not isinstance(measured, (int, float)) or not measured > 0 \
            or not isinstance(roofline_us, (int, float)) or not math.isfinite(roofline_us):
        return "—"
    percent = 100 * roofline_us / measured
    return f"{percent:.0f}%" if percent >= 10 else f"{percent:.2g}%"


def kernel_summary(name: str, best: dict[str, Any], starts: dict[str, Any]) -> str:
    """Kernel ``name`` against the best baseline over the shapes both were timed on: the
    geometric mean and the worst shape, or "" when none was."""
    ratios = {}
    for shape, row in starts.items():
        timed = row.get("kernels", {}).get(name) or {}
        if row.get("kernel_checks", {}).get(name) == "ok" and shape in best \
                and isinstance(timed.get("median_us"), (int, float)) and timed["median_us"] > 0:
            ratios[shape] = best[shape][1] / timed["median_us"]
    if not ratios:
        return ""
    geomean = math.exp(sum(math.log(r) for r in ratios.values()) / len(ratios))
    worst = min(ratios, key=ratios.__getitem__)
    return (f"{name}: {geomean:.3f}x the best baseline (geometric mean over {len(ratios)} "
            f"shapes), worst {ratios[worst]:.3f}x at {worst}")


def _speedup(best_us: Any, measured: Any) -> str:
    """The best baseline's time over ``measured``: above 1 is faster than every baseline."""
    if not isinstance(measured, (int, float)) or not measured > 0 \
            or not isinstance(best_us, (int, float)) or not math.isfinite(best_us):
        return "—"
    return f"{best_us / measured:.3f}x"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _timed(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return "—"
    if entry.get("error"):
        return "error" if not entry["error"].startswith("incorrect") else "incorrect"
    text = _us(entry.get("median_us"))
    iqr = entry.get("iqr_us")
    return f"{text} ±{_us(iqr)}" if isinstance(iqr, (int, float)) and math.isfinite(iqr) else text


def task_table(task: dict[str, Any]) -> list[str]:
    """Markdown lines for one task's result (or its error)."""
    lines = [f"### {task['task']}", ""]
    if task.get("error"):
        return lines + [f"Failed: `{_cell(task['error'])}`", ""]
    names = task["baseline_names"]
    on_gpu = bool(task.get("start"))
    others = sorted({k for s in (task.get("start") or {}).get("shapes", [])
                     for k in s.get("kernels", {})})
    columns = ["shape"] + (["roofline µs"] if on_gpu else []) + [f"{n} µs" for n in names] \
        + ["best", "compile s"] + (["start µs", "start RL", "start check"] if on_gpu else []) \
        + [c for k in others for c in (f"{k} µs", f"{k} vs best", f"{k} check")]
    if on_gpu:
        knobs = ", ".join(f"{k}={v}" for k, v in task["start"]["knobs"].items()) or "no knobs"
        lines += [f"Starting kernel `{task['start']['entry']}` ({knobs}), built in "
                  f"{task['start']['build_s']:.2f} s.", ""]
    lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    starts = {s["shape"]: s for s in (task.get("start") or {}).get("shapes", [])}
    for shape, row in task["shapes"].items():
        start = starts.get(shape)
        cells = [shape] + ([_us(start["roofline_us"]) if start else "—"] if on_gpu else [])
        cells += [_timed(row.get(n)) for n in names]
        best = task["best"].get(shape)
        cells.append(f"{best[0]} ({_fraction(start['roofline_us'], best[1])} RL)"
                     if best and start else best[0] if best else "—")
        first = (row.get("compile") or {}).get("first_call_s")
        cells.append(f"{first:.1f}" if isinstance(first, (int, float)) else "—")
        if on_gpu:
            timed = start["start"] if start else {}
            cells += [_timed(timed), _fraction(start["roofline_us"] if start else None,
                                               timed.get("median_us")),
                      start["start_check"] if start else "—"]
        for name in others:
            timed = (start or {}).get("kernels", {}).get(name)
            cells += [_timed(timed), _speedup(best[1] if best else None,
                                              (timed or {}).get("median_us")),
                      (start or {}).get("kernel_checks", {}).get(name, "—")]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    notes = [f"- {line}" for name in others
             if (line := kernel_summary(name, task["best"], starts))]
    notes += [f"- {name} skipped: {why}" for name, why in task["skipped"].items()]
    notes += [f"- {language} start skipped: {why}"
              for language, why in task.get("starts_missing", {}).items()]
    notes += [f"- {shape} {name}: {entry['error']}" for shape, row in task["shapes"].items()
              for name, entry in row.items() if entry.get("error")]
    notes += [f"- {shape} compile: {row['compile']['detail']}"
              for shape, row in task["shapes"].items() if row.get("compile", {}).get("detail")]
    return lines + ([""] + notes if notes else []) + [""]


def render_header(report: dict[str, Any]) -> str:
    """The measuring machine, the software, the command and the method."""
    machine, timing = report["machine"], report["timing"]
    software = ", ".join(f"{k} {v}" for k, v in report["versions"].items())
    driver = machine.get("gpu", {}).get("driver") if machine else None
    lines = [f"Measured {report['measured_at']} on {report['device']}"
             + (f", driver {driver}" if driver else "") + f"; {software}.", "",
             f"Command: `{report['command']}`", ""]
    if machine:
        lines += [f"Roofline: copy bandwidth {machine['copy_bandwidth_gbs']:,.0f} GB/s, matmul "
                  f"{machine['peak_gflops'] / 1e3:,.0f} TFLOP/s ({machine['matmul']}); ideal "
                  f"time = max(bytes / bandwidth, flops / matmul rate). RL: roofline time / "
                  f"measured time.", ""]
    regime = "L2 flushed before each sample" if report["on_gpu"] else (
        "cache flushed before each call" if timing["flush_cache"] else "warm cache (no flush)")
    lines += [f"Timing: the candidates' timer, {regime}, warm-up {timing['warmup']}, median "
              f"(± IQR) of {timing['min_repeats']} to {timing['max_repeats']} samples (until the "
              f"median's standard error is {100 * timing['target_rel_se']:g}% or "
              f"{timing['timing_budget_s']:g} s are spent)"
              + (f"; calls under {timing['cuda_graph_below_us']:g} µs timed as CUDA-graph "
                 f"replays" if report["on_gpu"] else "") + ".", ""]
    return "\n".join(lines)


def render_markdown(report: dict[str, Any]) -> str:
    lines = [render_header(report)]
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
        prog="python -m benchmarks.baselines",
        description="The baselines a user would pick (eager, torch.compile per shape, library "
                    "kernels) and the starting cuda kernel against the roofline, per task and "
                    "tuning shape.")
    parser.add_argument("--tasks", default=",".join(builtin_tasks()),
                        help="comma-separated built-in task names or task folders "
                             "(default: every built-in task)")
    parser.add_argument("--out", type=Path, help="write every figure as JSON here")
    parser.add_argument("--markdown", type=Path, help="write the tables as markdown here")
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default: cuda)")
    parser.add_argument("--budget-s", type=float, default=0.2,
                        help="timing budget per function and shape, seconds (default: 0.2)")
    parser.add_argument("--no-flush", action="store_true",
                        help="CPU only: time with a warm cache (the quickstart's regime)")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="the compile and baseline cache (default: the evaluator's)")
    parser.add_argument("--refresh", action="store_true",
                        help="measure again even where the baseline cache has the figures")
    parser.add_argument("--starts", default="",
                        help="GPU only: comma-separated kernel languages (e.g. cute,triton) "
                             "whose starting kernels are timed too, each beside the baselines "
                             "(tasks without a start in a language skip it, saying so)")
    args = parser.parse_args(argv)
    args.command = "python -m benchmarks.baselines " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    try:
        args.task_paths = [task_path(n.strip()) for n in args.tasks.split(",") if n.strip()]
    except ValueError as exc:
        parser.error(str(exc))
    if not args.task_paths:
        parser.error("--tasks names no task")
    from kernelswarm.search import SPECS

    args.start_languages = [n.strip() for n in args.starts.split(",") if n.strip()]
    unknown = [n for n in args.start_languages if n not in SPECS or not SPECS[n].runs_on("cuda")]
    if unknown:
        parser.error(f"--starts: {', '.join(unknown)} are not kernel languages that run on a GPU "
                     f"({', '.join(n for n, s in SPECS.items() if s.runs_on('cuda'))})")
    return args


def _settings(args: argparse.Namespace) -> EvaluatorSettings:
    extra = {"cache_dir": args.cache_dir} if args.cache_dir is not None else {}
    return EvaluatorSettings(device=args.device, timing_budget_s=args.budget_s,
                             flush_cache=not args.no_flush, **extra)


def write(report: dict[str, Any], out: Path | None, markdown: Path | None) -> None:
    """The report as JSON to ``out`` and as markdown to ``markdown`` (each when given)."""
    for path, text in ((out, lambda: json.dumps(_finite(report), indent=2)),
                       (markdown, lambda: render_markdown(report))):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text() + "\n")


def start_kernels(path: Path, languages: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The task's starting kernels in ``languages`` as candidates named "<language> start", and
    why each language without one is left out."""
    from kernelswarm.search import load_task

    task = load_task(path, "cuda")
    found, missing = {}, {}
    for language in languages:
        if language in task.kernels:
            found[f"{language} start"] = task.starting_candidate(language)
        else:
            missing[language] = f"the task has no {language} starting kernel"
    return found, missing


def _measure_task(bench: Any, settings: EvaluatorSettings, path: Path,
                  refresh: bool, languages: list[str] | None = None) -> dict[str, Any]:
    """One task's report entry, or its error."""
    from kernelswarm.evaluators.baselines.baselines import measure_baselines

    print(f"{path.name}: measuring ...", file=sys.stderr, flush=True)
    missing: dict[str, str] = {}
    try:
        # on a GPU the evaluator's cache entry (the starting cuda kernel timed alongside)
        language = "cuda" if settings.device.startswith("cuda") else None
        table = measure_baselines(path, settings, refresh=refresh, language=language)
        kernels, missing = start_kernels(path, languages or []) if bench is not None else ({}, {})
        start = asdict(bench.task(path, kernels=kernels)) if bench is not None else None
    except Exception as exc:  # one task's failure must not stop the others
        traceback.print_exc(file=sys.stderr)
        return {"task": path.name, "error": f"{type(exc).__name__}: {exc}"}
    doc = table.as_json()
    best = {shape: (found[0], found[1].median_us) for shape in table.shapes
            if (found := table.best(shape)) is not None}
    return {"task": table.task, "error": None, "baseline_names": table.names,
            "shapes": doc["shapes"], "skipped": doc["skipped"], "best": best,
            "versions": doc["versions"], "key": table.key, "cached": table.cached,
            "start": start, "starts_missing": missing}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure every task of ``args``; one task's failure is recorded and the others go on.
    The files are rewritten after each task, so a run cut short keeps what it measured."""
    from kernelswarm.evaluators.baselines.baseline_timing import BaselineBench, software_versions
    from kernelswarm.evaluators.baselines.baselines import device_name
    from kernelswarm.evaluators.measure.timing_protocol import TimingSettings

    settings = _settings(args)
    on_gpu = settings.device.startswith("cuda")
    began = time.perf_counter()
    bench = BaselineBench(settings) if on_gpu else None
    report: dict[str, Any] = {
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "device": device_name(settings.device), "on_gpu": on_gpu, "command": args.command,
        "machine": bench.machine.as_metrics() if bench else {},
        "versions": software_versions() if on_gpu else {},
        "timing": TimingSettings.of(settings).as_dict(), "tasks": {}}
    for path in args.task_paths:
        started = time.perf_counter()
        entry = _measure_task(bench, settings, path, args.refresh, args.start_languages)
        entry["wall_s"] = time.perf_counter() - started
        report["versions"].update(entry.get("versions", {}))
        if path == args.task_paths[0]:
            print(render_header(report), flush=True)
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
