"""A search on one GPU, judged afterwards against the best baseline and the roofline.

``python -m benchmarks.search_gpu --task silu_and_mul --lineages 4
--minutes 10 --out runs/silu-4``

1. Runs ``kernelswarm run`` on the task's ``cuda`` kernel with the built-in agent, the given
   lineages and one evaluation worker on the first visible GPU, for ``--minutes`` of search
   (with one worker, wall time is the GPU's time); the start-up before the search (Ray,
   calibration, the starting kernels' verdicts) is reported apart, as ``search_startup_s``.
2. Reads the run's Parquet records back: when each speedup over the start was first reached.
3. Times the starting kernel and the run's best kernel on every tuning shape in one process
   (evaluators/baselines/baseline_timing.py), next to the baselines a user would pick, from the same
   cache the search used (evaluators/baselines/baselines.py: eager, ``torch.compile`` specialised per
   shape in its faster mode, library kernels such as Liger where installed): per shape, the
   best kernel's speedup over the start, over ``torch.compile`` and over the best baseline
   (named), the search's own figure over it with its 95% interval, and the fraction of the
   roofline.

Prints the table and writes it with every figure as JSON (``--json``). ``--compare A.json
B.json`` prints how two runs of one task compare: final speedups, and the GPU seconds the second
needed to reach the first one's final speedup (1 lineage against 4).

"Large shapes" are those whose roofline time is at least ``LARGE_US`` (10 µs): below that the
launch and the memory latency, not bytes, bound every kernel.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kernelswarm.search.measured import EvaluationCost

LARGE_US = 10.0
COMPILE_TOLERANCE = 0.97  # "no shape more than 3% slower than torch.compile"


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.search_gpu",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", help="a built-in task name or a task folder")
    parser.add_argument("--lineages", type=int, default=4)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--languages", default="cuda",
                        help="the languages searched, comma-separated (lineages take them in "
                             "turn), the first the reference; default cuda")
    parser.add_argument("--compile-start", action="store_true",
                        help="triton lineages judge torch.compile's own kernel first "
                             "(search.compile_start) and go on from it")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("runs"), help="run folders go here")
    parser.add_argument("--json", type=Path, help="write the report here")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="any configuration override, as for kernelswarm run")
    parser.add_argument("--no-judge", action="store_true",
                        help="skip step 3: report the search's own figures and its throughput")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("FEWER.json", "MORE.json"),
                        help="compare two reports instead of running")
    args = parser.parse_args(argv)
    args.argv = list(argv if argv is not None else sys.argv[1:])
    return args


def _overrides(args: argparse.Namespace) -> list[str]:
    languages = [n.strip() for n in args.languages.split(",") if n.strip()]
    chosen = [f"task.language={json.dumps(languages[0])}"] if len(languages) == 1 else [
        f"search.languages={json.dumps(languages)}"]
    return [f"task.name={json.dumps(str(args.task))}", *chosen,
            *(["search.compile_start=true"] if args.compile_start else []),
            'evaluator.device="cuda"', "evaluator.workers=1", f"search.lineages={args.lineages}",
            f"search.wall_time_s={args.minutes * 60:g}", "search.candidates_per_lineage=100000",
            f"run.seed={args.seed}", f"run.out_dir={json.dumps(str(args.out))}",
            f'run.name="search-gpu-{args.lineages}l"', "tracking.mlflow=false",
            "evaluator.run_timeout_s=300", "timing.budget_s=0.15", *args.set]


def progress_curve(run_dir: Path) -> list[tuple[float, float]]:
    """(seconds since the run started, best speedup so far) at every improvement."""
    from kernelswarm.experiments.sinks import read_evaluations

    rows = read_evaluations(run_dir).select(["seq", "wall_s", "global_best"]).to_pylist()
    curve: list[tuple[float, float]] = []
    for row in sorted({r["seq"]: r for r in rows}.values(), key=lambda r: r["seq"]):
        if not curve or row["global_best"] > curve[-1][1] + 1e-12:
            curve.append((float(row["wall_s"]), float(row["global_best"])))
    return curve


def time_to_reach(curve: list[tuple[float, float]], speedup: float) -> float | None:
    return next((t for t, best in curve if best >= speedup - 1e-9), None)


def _geomean(values: list[float]) -> float:
    good = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, good)) / len(good)) if good else math.nan


def compile_start_of(run_dir: Path, task_path: Path) -> Any:
    """The kernel the run's lineages judged first from torch.compile (``search.compile_start``),
    as recorded, or None."""
    from kernelswarm.experiments.run.compile_start import MOVE
    from kernelswarm.experiments.run.resume import restore_records
    from kernelswarm.search import load_task

    for record in restore_records(run_dir, load_task(task_path, "cuda")):
        if record.candidate.origin.move == MOVE and record.evaluation.ok:
            return record.candidate
    return None


def judge(task_path: Path, best: Any, best_eval: Any, settings: Any, language: str = "cuda",
          generated: Any = None) -> dict[str, Any]:
    """Start and ``best`` timed on every tuning shape, with the verdicts, against the best
    baseline of each shape; ``best_eval`` is the search's own evaluation of ``best``;
    ``language`` the run's reference language (whose baseline cache the search used);
    ``generated`` the kernel from torch.compile the run started from, timed too."""
    from kernelswarm.evaluators.baselines.baseline_timing import BaselineBench, software_versions
    from kernelswarm.evaluators.baselines.baselines import measure_baselines

    bench = BaselineBench(settings)
    kernels = {"best": best, **({"compile_start": generated} if generated is not None else {})}
    measured = bench.task(task_path, kernels=kernels)
    table = measure_baselines(task_path, settings, language=language)  # the search's cache
    in_search = {r.shape: r for r in best_eval.shapes}
    shapes = []
    for s in measured.shapes:
        mine, compiled = s.kernels["best"], table.get(s.shape, "compile")
        started = s.kernels.get("compile_start")
        name, baseline = table.best(s.shape) or ("", None)
        search = in_search.get(s.shape)
        shapes.append({
            "shape": s.shape, "roofline_us": s.roofline_us, "start_us": s.start.median_us,
            "compile_us": compiled.median_us, "compile_mode": compiled.detail,
            "best_baseline": name,
            "best_baseline_us": baseline.median_us if baseline else math.nan,
            "best_us": mine.median_us, "check": s.kernel_checks["best"],
            "vs_start": s.start.median_us / mine.median_us,
            "vs_compile": compiled.median_us / mine.median_us,
            "vs_best": (baseline.median_us if baseline else math.nan) / mine.median_us,
            "search_vs_best": search.speedup_vs_best if search else math.nan,
            "search_vs_best_ci": search.speedup_vs_best_ci if search else math.nan,
            "roofline_fraction": s.roofline_us / mine.median_us,
            "large": s.roofline_us >= LARGE_US,
            "compile_start_us": started.median_us if started else math.nan,
            "compile_start_vs_compile": (compiled.median_us / started.median_us
                                         if started else math.nan)})
    large = [s for s in shapes if s["large"]]
    return {
        "machine": bench.machine.as_metrics(), "versions": {**software_versions(), **table.versions},
        "baselines_skipped": dict(table.skipped), "shapes": shapes,
        "geomean_vs_start": _geomean([s["vs_start"] for s in shapes]),
        "geomean_vs_compile": _geomean([s["vs_compile"] for s in shapes]),
        "geomean_compile_start_vs_compile": _geomean([s["compile_start_vs_compile"]
                                                      for s in shapes]),
        "geomean_vs_best": _geomean([s["vs_best"] for s in shapes]),
        "worst_vs_compile": min((s["vs_compile"] for s in shapes), default=math.nan),
        "worst_vs_best": min((s["vs_best"] for s in shapes), default=math.nan),
        "min_roofline_large": min((s["roofline_fraction"] for s in large), default=math.nan),
        "all_correct": all(s["check"] == "ok" for s in shapes)}


def throughput(run_dir: Path, began: float | None = None) -> dict[str, Any]:
    """Evaluations recorded and evaluations per minute of the search's wall time (its start,
    calibration and confirmation included: with one evaluation worker, the GPU's minutes);
    the same after the starting kernels' verdicts (``after_start``, ``searched``); and the
    seconds the evaluations waited for a build (``build_wait_s``: built by the judge because
    no compile pool had, or compiled by a JIT at the kernel's first calls). ``began``: the
    command's start (Unix time), from which ``first_candidate_s`` counts."""
    from kernelswarm.experiments.sinks import read_evaluations

    rows = read_evaluations(run_dir).select(
        ["seq", "wall_s", "eval_s", "compile_s", "status", "metrics", "origin_role",
         "language", "timestamp"]).to_pylist()
    records = list({r["seq"]: r for r in rows}.values())
    span = max((float(r["wall_s"]) for r in records), default=0.0)
    evals = sorted(float(r["eval_s"]) for r in records if r["eval_s"] is not None)
    statuses: dict[str, int] = {}
    for r in records:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    waits = [EvaluationCost.parse(json.loads(r["metrics"] or "{}")).build_wait_s
             for r in records]
    return {"evaluations": len(records), "span_s": span,
            "evals_per_gpu_minute": len(records) / (span / 60) if span > 0 else 0.0,
            "after_start": searched(records, span),
            **({"first_candidate_s": first_candidate_s(records, began)} if began else {}),
            "build_wait_s": round(sum(waits), 3),
            "median_eval_s": evals[len(evals) // 2] if evals else math.nan,
            "statuses": statuses, "median_phase_s": _median_phases(records)}


def searched(records: list[dict[str, Any]], span: float) -> dict[str, Any]:
    """What the search itself judged (every candidate but the starting kernels), per language,
    from the first starting kernel's verdict to the last evaluation: a lineage searches from
    its own start's verdict on, and one language's start may be judged long after another's
    lineages began (compile's Triton kernel, say, behind a quick CUDA start)."""
    started = min((float(r["wall_s"]) for r in records if r["origin_role"] == "seed"),
                  default=0.0)
    found = [r for r in records if r["origin_role"] != "seed"]
    span_s = span - started
    languages: dict[str, int] = {}
    for r in found:
        languages[r["language"]] = languages.get(r["language"], 0) + 1
    return {"evaluations": len(found), "span_s": span_s, "languages": languages,
            # the first candidate judged after the starting kernels, from the first's verdict
            "first_candidate_after_s": min((float(r["wall_s"]) for r in found),
                                           default=math.nan) - started,
            "evals_per_gpu_minute": len(found) / (span_s / 60) if span_s > 0 else 0.0}


def first_candidate_s(records: list[dict[str, Any]], began: float) -> float:
    """Seconds from the command's start (``began``, Unix time) to the first candidate judged
    after the starting kernels: start-up, the starts' verdicts and that candidate together."""
    return min((float(r["timestamp"]) for r in records if r["origin_role"] != "seed"),
               default=math.nan) - began


def _median_phases(records: list[dict[str, Any]]) -> dict[str, float]:
    """Per phase of an evaluation (and per request to the runner, and compiling), the median
    seconds over the records that reached it."""
    seen: dict[str, list[float]] = {"compile": [float(r["compile_s"] or 0) for r in records]}
    for r in records:
        cost = EvaluationCost.parse(json.loads(r["metrics"] or "{}"))  # the stored form
        for prefix, figures in (("", cost.phase_s), ("request.", cost.request_s)):
            for name, value in figures.items():
                seen.setdefault(prefix + name, []).append(value)
    return {name: round(sorted(v)[len(v) // 2], 3) for name, v in seen.items() if v}


def _throughput_line(report: dict[str, Any]) -> str:
    t = report["throughput"]
    after = t.get("after_start") or {}
    searched = (f"; after the start's verdict {after['evaluations']} in "
                f"{after['span_s']:.0f} s: {after['evals_per_gpu_minute']:.1f} a GPU-minute "
                f"({', '.join(f'{k} {v}' for k, v in after['languages'].items())}), "
                f"{t.get('build_wait_s', 0.0):.1f} s waiting for builds") if after else ""
    startup = report.get("search_startup_s")
    first = t.get("first_candidate_s", math.nan)
    if not math.isfinite(first) and after and isinstance(startup, float):
        first = startup + after.get("first_candidate_after_s", math.nan)  # an older report
    opening = (f"start-up {startup:.1f} s (the command's start to the search's), the first "
               f"candidate judged {first:.1f} s after the command's start; "
               if isinstance(startup, float) and math.isfinite(startup) and math.isfinite(first)
               else "")
    screening = report.get("screening") or {}
    screened = (f"; screened out {screening['screened_out']} on "
                f"{screening['screen_shapes']} shapes, about {screening['saved_s']:.1f} s of "
                f"timing saved" if screening.get("screen_shapes") else "")
    return opening + (f"{t['evaluations']} evaluations in {t['span_s']:.0f} s of search: "
            f"{t['evals_per_gpu_minute']:.1f} a GPU-minute (median eval_s "
            f"{t['median_eval_s']:.2f} s){searched}{screened}; search's own best "
            f"{report['search_best']:.3f}x vs start")


def knobs_text(knobs: dict[str, Any]) -> str:
    """A kernel's knob values; a generated start's many per-shape knobs by those set away from
    0 (as compiled)."""
    if len(knobs) <= 6:
        return str(knobs)
    moved = {k: v for k, v in knobs.items() if v != 0}
    return (f"{len(knobs)} knobs, " + (f"set away from compile's choice: {moved}" if moved
                                       else "all as compiled"))


def _table(report: dict[str, Any]) -> str:
    if report["judged"] is None:
        return f"### {report['task']}: {report['lineages']} lineage(s)\n\n" + \
            _throughput_line(report)
    j = report["judged"]
    software = ", ".join(f"{k} {v}" for k, v in j["versions"].items())
    lines = [f"### {report['task']}: {report['lineages']} lineage(s), {report['minutes']:g} min "
             f"on {j['machine'].get('device', 'cuda')}", "", f"Software: {software}.", "",
             f"Command: `{report['command']}`", ""]
    started = any(math.isfinite(s.get("compile_start_us", math.nan)) for s in j["shapes"])
    lines += ["| shape | roofline µs | start µs | compile µs | "
              + ("compile's kernel as start µs | " if started else "")
              + "best baseline | baseline µs | best µs | vs start | vs compile | vs best "
              "baseline | in search (95%) | best RL | check |",
              "|---" * (14 if started else 13) + "|"]
    for s in j["shapes"]:
        search = f"{s['search_vs_best']:.2f}x"
        if isinstance(s["search_vs_best_ci"], float) and math.isfinite(s["search_vs_best_ci"]):
            search += f" ±{s['search_vs_best_ci']:.2f}"
        own = f"{s['compile_start_us']:.2f} | " if started else ""
        lines.append(f"| {s['shape']} | {s['roofline_us']:.2f} | {s['start_us']:.2f} | "
                     f"{s['compile_us']:.2f} | {own}{s['best_baseline'] or '—'} | "
                     f"{s['best_baseline_us']:.2f} | {s['best_us']:.2f} | {s['vs_start']:.2f}x | "
                     f"{s['vs_compile']:.2f}x | {s['vs_best']:.2f}x | {search} | "
                     f"{s['roofline_fraction']:.0%}{' (large)' if s['large'] else ''} | "
                     f"{s['check']} |")
    skipped = "; ".join(f"{k}: {v}" for k, v in j["baselines_skipped"].items()) or "none"
    lines += ["", f"geomean vs start {j['geomean_vs_start']:.3f}x · geomean vs the best baseline "
                  f"{j['geomean_vs_best']:.3f}x (worst shape {j['worst_vs_best']:.3f}x) · "
                  f"geomean vs torch.compile {j['geomean_vs_compile']:.3f}x (worst shape "
                  f"{j['worst_vs_compile']:.3f}x, target >= {COMPILE_TOLERANCE}) · least "
                  f"roofline fraction on large shapes {j['min_roofline_large']:.0%} (target >= "
                  f"85%) · {report['evaluations']} evaluations, search's own best "
                  f"{report['search_best']:.3f}x vs start · best kernel {report['best_id']} "
                  f"{knobs_text(report['best_knobs'])} ({report.get('best_language', 'cuda')}, "
                  f"{report['best_move']}) · baselines skipped: {skipped}"
                  + (f" · torch.compile's kernel as the start (re-timed): "
                     f"{j['geomean_compile_start_vs_compile']:.3f}x compile in geomean"
                     if started else ""), "", _throughput_line(report),
              *language_lines(report)]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from kernelswarm.experiments.config import load_config
    from kernelswarm.experiments.run.ray_start import RayStart

    config = load_config(None, _overrides(args))
    began = time.time()
    # Ray starts while the rest is imported and the run prepared, as ``kernelswarm run``
    # starts it
    ray_start = RayStart(config.cluster.address, config.cluster.num_cpus)
    try:
        from rich.console import Console

        from kernelswarm.experiments.run.execute import evaluator_settings
        from kernelswarm.experiments.run.execute import run as run_search

        outcome = run_search(config, Console(stderr=True), ray_start=ray_start)
    finally:
        ray_start.stop()

    summary = outcome.result.summary
    if summary.best is None:
        raise SystemExit("the search found no correct kernel")
    best, best_eval = summary.best
    curve = progress_curve(outcome.run_dir)
    generated = compile_start_of(outcome.run_dir, config.task_path()) \
        if config.search.compile_start else None
    judged = None if args.no_judge else judge(config.task_path(), best, best_eval,
                                              evaluator_settings(config), config.languages[0],
                                              generated)
    command = "python -m benchmarks.search_gpu " + " ".join(
        shlex.quote(a) for a in args.argv)
    return {"task": config.task.name, "lineages": args.lineages, "minutes": args.minutes,
            "command": command, "best_file": str(outcome.best_path),
            "run_dir": str(outcome.run_dir), "wall_s": time.time() - began,
            "evaluations": summary.records, "search_best": best_eval.speedup,
            "best_id": best.id, "best_knobs": best.knob_values, "best_move": best.origin.move,
            "best_language": best.language, "languages": list(config.languages),
            "compile_start": generated.id if generated is not None else None,
            "best_source": best.source, "curve": curve, "diversity": summary.diversity,
            "migrations": summary.migrations, "utilisation": outcome.result.utilisation,
            "stop_reasons": [asdict(r) for r in outcome.result.lineages], "judged": judged,
            "throughput": throughput(outcome.run_dir, began),
            # from the command's start to the search's (outside --minutes)
            "search_startup_s": outcome.result.startup_s,
            # --set search.screen_shapes=N: candidates screened out and the timing they saved
            "screening": {"screen_shapes": config.search.screen_shapes,
                          "screened_out": summary.screened_out,
                          "saved_s": summary.screen_saved_s},
            "language_bests": language_bests(outcome.run_dir)}


def language_bests(run_dir: Path) -> dict[str, Any]:
    """Each searched language's best as the run's summary.json states it (over its own start,
    the reference's start and, in search, the best baseline); {} where the run wrote none."""
    try:
        languages = json.loads((run_dir / "summary.json").read_text()).get("languages") or {}
    except (OSError, ValueError):
        return {}
    return {name: entry.get("best") for name, entry in languages.items()}


def language_lines(report: dict[str, Any]) -> list[str]:
    """One line per language of a run of several: its best, in search."""
    bests = report.get("language_bests") or {}
    if len(bests) < 2:
        return []
    lines = ["", "Each language's best, in search:", ""]
    for name, best in bests.items():
        lines.append(f"- {name}: " + ("no correct kernel" if not best else
                     f"{_times(best.get('speedup_vs_start'))} its own start, "
                     f"{_times(best.get('speedup_vs_reference'))} the reference start, "
                     f"{_times(best.get('speedup_vs_best_baseline'))} the best baseline "
                     f"({best.get('candidate_id')})"))
    return lines


def _times(value: Any) -> str:
    return f"{value:.3f}x" if isinstance(value, (int, float)) and math.isfinite(value) else "—"


def compare(fewer: dict[str, Any], more: dict[str, Any]) -> str:
    target = fewer["search_best"]
    reached = time_to_reach([tuple(p) for p in more["curve"]], target)
    base_at = time_to_reach([tuple(p) for p in fewer["curve"]], target)
    return "\n".join([
        f"### {fewer['task']}: {fewer['lineages']} vs {more['lineages']} lineages",
        "", "| lineages | final best vs start | GPU s to reach "
            f"{target:.3f}x (the {fewer['lineages']}-lineage final) |", "|---|---|---|",
        f"| {fewer['lineages']} | {fewer['search_best']:.3f}x | "
        f"{'—' if base_at is None else f'{base_at:.0f}'} |",
        f"| {more['lineages']} | {more['search_best']:.3f}x | "
        f"{'not reached' if reached is None else f'{reached:.0f}'} |"])


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    if args.compare:
        fewer, more = (json.loads(p.read_text()) for p in args.compare)
        print(compare(fewer, more))
        return 0
    if not args.task:
        raise SystemExit("--task is required (or --compare)")
    report = run(args)
    text = _table(report)
    print(text, flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
