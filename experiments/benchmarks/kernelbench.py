"""The built-in agent over a KernelBench level subset: fast_p and geomean speedups.

``python -m kernelswarm.experiments.benchmarks.kernelbench --kernelbench ~/KernelBench
--level 1 --first 20 --starts starts/ --language triton --device cuda --minutes 5
--out runs/kb-l1 --json kb-l1.json``

1. Imports the chosen problems from the user's KernelBench checkout into ``OUT/tasks/`` (task
   folders made at run time; nothing of KernelBench is part of kernelswarm). A folder that is
   already there is reused, so a second invocation continues an interrupted one's imports.
2. Gives each its starting kernel from ``--starts``: ``<problem>.cpp`` (cpp) or ``<problem>.py``
   (triton, entry point ``forward``), in the task's calling contract (docs/tasks.md); with
   ``--compile-starts``, a problem without one gets one generated from ``torch.compile``
   (Inductor's code for it, docs/tasks.md). A problem with neither is counted as unsolved ("no
   starting kernel"): the built-in agent tunes and rewrites kernels, it does not write a first
   one.
3. Runs ``kernelswarm run`` with the built-in agent on each (``--lineages``, ``--minutes`` of
   wall time per lineage), and takes the search's best kernel and its evaluation: correct on
   every tuning and held-out shape, its time against PyTorch eager (the problem's
   ``Model.forward``) and ``torch.compile`` specialised for the shape (measured on a GPU; on the
   CPU only with ``KERNELSWARM_BASELINE_COMPILE=1``).

Reports, over every problem of the subset: ``fast_p`` for p = 1.0 and 1.5, the share of problems
whose best kernel is correct and more than p times faster than eager (and than compile), and the
geometric mean of the best kernels' speedups over eager and over compile, over the problems with
a correct kernel (their count is given). A problem that failed to import or to search counts as
not fast. Prints a markdown table and writes every figure as JSON (``--json``).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import shlex
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kernelswarm.experiments.kernelbench.template import TASK_PY
from kernelswarm.search.language_spec import SPECS

P_VALUES = (1.0, 1.5)
# The languages an imported KernelBench task launches: those its task.py defines a launcher for.
LANGUAGES = tuple(name for name, spec in SPECS.items()
                  if f"\ndef {spec.launcher}(" in TASK_PY.template)


@dataclass(frozen=True)
class ProblemResult:
    """One problem of the subset: whether its best kernel is correct, and how fast."""

    problem: str
    status: str  # "ok", or why there is no correct kernel
    speedup_vs_eager: float = math.nan
    speedup_vs_compile: float = math.nan
    speedup_vs_start: float = math.nan
    evaluations: int = 0
    best_move: str = ""
    run_dir: str = ""
    start: str = ""  # "given" (from --starts) or "compiled" (from torch.compile)

    @property
    def correct(self) -> bool:
        return self.status == "ok"


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m kernelswarm.experiments.benchmarks.kernelbench",
        description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernelbench", type=Path, required=True,
                        help="a KernelBench checkout (or the folder holding level1/, ...)")
    parser.add_argument("--level", type=int, default=1)
    parser.add_argument("--first", type=int, help="the first N problems of the level")
    parser.add_argument("--only", action="append", default=[], metavar="PREFIX",
                        help="problems whose file name starts with PREFIX, e.g. 19_ (repeatable)")
    parser.add_argument("--starts", type=Path,
                        help="starting kernels: <problem><suffix>, the language's suffix "
                             "(" + ", ".join(f"{SPECS[n].suffix} for {n}" for n in LANGUAGES)
                             + ")")
    parser.add_argument("--compile-starts", action="store_true",
                        help="a problem without a kernel in --starts gets one generated from "
                             "torch.compile (kernelswarm tasks start --from-compile)")
    parser.add_argument("--language", choices=LANGUAGES, default="triton")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--lineages", type=int, default=2)
    parser.add_argument("--minutes", type=float, default=5.0, help="wall time per lineage")
    parser.add_argument("--out", type=Path, default=Path("runs/kernelbench"))
    parser.add_argument("--json", type=Path, help="write the report here")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="any configuration override, as for kernelswarm run")
    args = parser.parse_args(argv)
    if args.starts is None and not args.compile_starts:
        parser.error("give --starts DIR, --compile-starts, or both")
    args.argv = list(argv if argv is not None else sys.argv[1:])
    return args


def _subset(args: argparse.Namespace) -> list[str]:
    """The problem file names of the subset, in KernelBench's numbering."""
    from kernelswarm.experiments.kernelbench.level import level_files

    files = [p.name for p in level_files(args.kernelbench, args.level)]
    if args.only:
        files = [f for f in files if any(f.startswith(prefix) for prefix in args.only)]
    return files[:args.first] if args.first else files


def _overrides(args: argparse.Namespace, task: Path, name: str) -> list[str]:
    return [f"task.name={json.dumps(str(task))}", f'task.language="{args.language}"',
            f'evaluator.device="{args.device}"', f"search.lineages={args.lineages}",
            f"search.wall_time_s={args.minutes * 60:g}", "search.candidates_per_lineage=100000",
            f"run.out_dir={json.dumps(str(args.out / 'runs'))}", f"run.name={json.dumps(name)}",
            "tracking.mlflow=false", *args.set]


def _search(args: argparse.Namespace, task: Path, problem: str) -> ProblemResult:
    """The built-in agent's search on one imported problem."""
    from rich.console import Console

    from kernelswarm.experiments.config import load_config
    from kernelswarm.experiments.run.runner import run as run_search
    from kernelswarm.search import StartingKernelFailed, TaskError

    suffix = SPECS[args.language].suffix
    start = args.starts / f"{problem}{suffix}" if args.starts else None
    if start is not None and start.is_file():
        shutil.copyfile(start, task / f"kernel{suffix}")
        origin = "given"
    elif args.compile_starts:
        from kernelswarm.experiments.authoring.compiled_start import start_from_compile

        try:  # judged by the search itself, as a given start is
            start_from_compile(task, args.language, force=True, evaluate=False)
        except TaskError as exc:
            return ProblemResult(problem, f"no starting kernel: {_line(str(exc))}",
                                 start="compiled")
        origin = "compiled"
    else:
        return ProblemResult(problem, f"no starting kernel ({problem}{suffix} not in --starts)")
    quiet = Console(file=io.StringIO(), width=160)
    try:
        outcome = run_search(load_config(None, _overrides(args, task, problem)), quiet)
    except StartingKernelFailed as exc:
        return ProblemResult(problem, f"the starting kernel fails: {_line(str(exc))}",
                             start=origin)
    except (TaskError, ValueError) as exc:
        return ProblemResult(problem, f"cannot search: {_line(str(exc))}", start=origin)
    summary = outcome.result.summary
    if summary.best is None:
        return ProblemResult(problem, "no correct kernel", evaluations=summary.records,
                             run_dir=str(outcome.run_dir), start=origin)
    best, evaluation = summary.best
    return ProblemResult(problem, "ok" if evaluation.ok else evaluation.status.value,
                         _positive(evaluation.speedup_vs_eager),
                         _positive(evaluation.speedup_vs_compile),
                         _positive(evaluation.speedup), summary.records, best.origin.move,
                         str(outcome.run_dir), origin)


def _line(text: str) -> str:
    return " ".join(text.split())[:300]


def _positive(value: float) -> float:
    return value if value > 0 and math.isfinite(value) else math.nan


def geomean(values: list[float]) -> float:
    """The geometric mean of the finite positive values; NaN when there are none."""
    good = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, good)) / len(good)) if good else math.nan


def fast_p(results: list[ProblemResult], p: float, field: str) -> float:
    """The share of all problems whose best kernel is correct and more than ``p`` times faster
    than the baseline ``field`` names; NaN when no problem has that baseline measured."""
    if not results or all(math.isnan(getattr(r, field)) for r in results if r.correct):
        return math.nan
    fast = sum(1 for r in results if r.correct and getattr(r, field) > p)
    return fast / len(results)


def summarise(results: list[ProblemResult]) -> dict[str, Any]:
    """fast_p and geomeans over eager and compile, and how many problems are correct."""
    correct = [r for r in results if r.correct]
    figures: dict[str, Any] = {"problems": len(results), "correct": len(correct)}
    for baseline in ("eager", "compile"):
        field = f"speedup_vs_{baseline}"
        for p in P_VALUES:
            figures[f"fast_{p:g}_vs_{baseline}"] = fast_p(results, p, field)
        values = [getattr(r, field) for r in correct]
        figures[f"geomean_vs_{baseline}"] = geomean(values)
        figures[f"geomean_vs_{baseline}_over"] = sum(1 for v in values if v > 0)
    return figures


def _versions(device: str) -> dict[str, str]:
    """The software and the device the figures come from."""
    from kernelswarm.evaluators.baseline_timing import versions
    from kernelswarm.evaluators.baselines import device_name

    return {**versions(), "device": device_name(device)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Import, search and summarise the subset; the report."""
    from kernelswarm.experiments.kernelbench.level import ImportStatus, import_level

    began = time.time()
    files = _subset(args)
    imports = import_level(args.kernelbench, args.level, args.out / "tasks", only=files)
    results = []
    for item in imports:
        if item.status is ImportStatus.FAILED:
            results.append(ProblemResult(item.problem, f"not imported: {item.reason}"))
            continue
        results.append(_search(args, item.folder, item.problem))
    command = "python -m kernelswarm.experiments.benchmarks.kernelbench " + " ".join(
        shlex.quote(a) for a in args.argv)
    return {"command": command, "level": args.level, "language": args.language,
            "device": args.device, "lineages": args.lineages, "minutes": args.minutes,
            "versions": _versions(args.device), "wall_s": time.time() - began,
            "summary": summarise(results), "problems": [asdict(r) for r in results]}


def _x(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.2f}x"


def _share(value: float) -> str:
    return "not measured" if math.isnan(value) else f"{value:.0%}"


def table(report: dict[str, Any]) -> str:
    """The report as markdown: the figures, then one row per problem."""
    s = report["summary"]
    software = ", ".join(f"{k} {v}" for k, v in report["versions"].items())
    lines = [f"### KernelBench level {report['level']}: {s['problems']} problems, "
             f"{report['language']} on {report['versions']['device']}", "",
             f"Command: `{report['command']}`", "", f"Software: {software}.", "",
             "| baseline | fast_1.0 | fast_1.5 | geomean (over correct problems) |",
             "|---|---|---|---|"]
    for baseline in ("eager", "compile"):
        lines.append(f"| {baseline} | {_share(s[f'fast_1_vs_{baseline}'])} | "
                     f"{_share(s[f'fast_1.5_vs_{baseline}'])} | "
                     f"{_x(s[f'geomean_vs_{baseline}'])} "
                     f"({s[f'geomean_vs_{baseline}_over']} of {s['problems']}) |")
    lines += ["", f"{s['correct']} of {s['problems']} problems have a correct kernel.", "",
              "| problem | start | status | vs eager | vs compile | vs start | evaluations | "
              "best move |",
              "|---|---|---|---|---|---|---|---|"]
    for r in report["problems"]:
        lines.append(f"| {r['problem']} | {r.get('start') or '—'} | {r['status']} | "
                     f"{_x(r['speedup_vs_eager'])} | "
                     f"{_x(r['speedup_vs_compile'])} | {_x(r['speedup_vs_start'])} | "
                     f"{r['evaluations']} | {r['best_move'] or '—'} |")
    return "\n".join(lines)


def _finite(value: Any) -> Any:
    """``value`` with NaN as None, recursively (JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    report = run(args)
    print(table(report), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(_finite(report), indent=2, default=str))
    return 0 if report["summary"]["correct"] else 1


if __name__ == "__main__":
    sys.exit(main())
