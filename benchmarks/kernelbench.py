"""The built-in agent over a KernelBench level subset: fast_p and geomean speedups.

``python -m benchmarks.kernelbench --kernelbench ~/KernelBench
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
import re
import shlex
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kernelswarm.experiments.kernelbench.report import (  # noqa: F401 (the benchmark's API)
    P_VALUES,
    ProblemResult,
    fast_p,
    finite,
    geomean,
    summarise,
    table,
    x_times,
)
from kernelswarm.experiments.kernelbench.template import TASK_PY
from kernelswarm.search.language_spec import SPECS

NOT_SEARCHED = "start written, not searched (--no-search)"
NOT_RUN = "not run: the benchmark was stopped first (--resume runs it)"
INDUCTOR_CODE = "inductor"  # a task folder's copy of the code torch.compile wrote for it
RESULTS = "results.jsonl"
# The languages an imported KernelBench task launches: those its task.py defines a launcher for.
LANGUAGES = tuple(name for name, spec in SPECS.items()
                  if f"\ndef {spec.launcher}(" in TASK_PY.template)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.kernelbench",
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
    parser.add_argument("--parallel", type=int, metavar="N",
                        help="problems at once (default: one per visible GPU on cuda, 1 on cpu)")
    parser.add_argument("--problem-timeout", type=float, metavar="S",
                        help="a problem's limit in seconds, start to end (default: the search's "
                             "wall time plus 600 s)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the problems the results file already has, run the others")
    parser.add_argument("--results", type=Path, metavar="FILE",
                        help="the rows, appended as problems end (default OUT/results.jsonl)")
    parser.add_argument("--no-search", action="store_true",
                        help="stop after each problem's starting kernel is written (which "
                             "problems get a start, and why not)")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # one problem's own process
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.starts is None and not args.compile_starts:
        parser.error("give --starts DIR, --compile-starts, or both")
    if args.parallel is not None and args.parallel < 1:
        parser.error("--parallel must be at least 1")
    if args.problem_timeout is not None and args.problem_timeout <= 0:
        parser.error("--problem-timeout must be positive")
    if (args.one is None) != (args.result is None):
        parser.error("--one and --result go together")
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


def _search(args: argparse.Namespace, task: Path, problem: str,
            stage: Callable[[str], None] = lambda _: None) -> ProblemResult:
    """The built-in agent's search on one imported problem (``stage`` is told each step)."""
    from rich.console import Console

    from kernelswarm.experiments.config import load_config
    from kernelswarm.experiments.run.execute import run as run_search
    from kernelswarm.search import StartingKernelFailed, TaskError

    suffix = SPECS[args.language].suffix
    start = args.starts / f"{problem}{suffix}" if args.starts else None
    if start is not None and start.is_file():
        shutil.copyfile(start, task / f"kernel{suffix}")
        origin = "given"
    elif args.compile_starts:
        from kernelswarm.experiments.authoring.compiled_start import start_from_compile

        stage("generating the start from torch.compile")
        try:  # judged by the search itself, as a given start is
            _in_own_process(start_from_compile, task, args.language, force=True,
                            evaluate=False, keep_code=task / INDUCTOR_CODE)
        except TaskError as exc:
            return ProblemResult(problem, f"no starting kernel: {_line(str(exc))}",
                                 start="compiled")
        origin = "compiled"
    else:
        return ProblemResult(problem, f"no starting kernel ({problem}{suffix} not in --starts)")
    if args.no_search:
        return ProblemResult(problem, NOT_SEARCHED, start=origin)
    stage(f"searching: {args.lineages} lineage(s), {args.minutes:g} min")
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


def _in_own_process(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` in a process of its own, its exception raised here: generating a
    start runs the problem on the device, and a process keeps the memory its allocator
    cached until it ends; the search that follows needs that memory for its runners."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args, **kwargs).result()


def _line(text: str) -> str:
    """``text`` on one line, without terminal colours, at most 300 characters."""
    return " ".join(re.sub(r"\x1b\[[0-9;]*m", "", text).split())[:300]


def _positive(value: float) -> float:
    return value if value > 0 and math.isfinite(value) else math.nan


def _versions(device: str) -> dict[str, str]:
    """The software and the device the figures come from."""
    from kernelswarm.evaluators.baselines.baseline_timing import software_versions
    from kernelswarm.evaluators.baselines.baselines import device_name

    return {**software_versions(), "device": device_name(device)}


class _Stopped(Exception):
    """SIGTERM while problems run (a device call's limit, a scheduler)."""


def _stop(signum: int, frame: Any) -> None:
    raise _Stopped


def _problem_timeout(args: argparse.Namespace) -> float:
    return args.problem_timeout or args.minutes * 60 + 600


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Import the subset, search every problem (in processes of their own, one per GPU at a
    time, results.jsonl written as each ends) and summarise; the report."""
    from kernelswarm.experiments.kernelbench.jobs import ResultsFile, run_jobs, slots
    from kernelswarm.experiments.kernelbench.level import ImportStatus, import_level

    began = time.time()
    files = _subset(args)
    results_file = ResultsFile(args.results or args.out / RESULTS)
    kept = results_file.rows()
    if kept and not args.resume:
        raise SystemExit(f"{results_file.path} holds {len(kept)} problem(s) of an earlier run: "
                         f"give --resume to go on from it, or another --out")
    where = slots(args.device, args.parallel)
    imports = import_level(args.kernelbench, args.level, args.out / "tasks", only=files)
    results: dict[str, ProblemResult] = {}
    todo = []
    for item in imports:
        if item.status is ImportStatus.FAILED:
            results[item.problem] = ProblemResult(item.problem, f"not imported: {item.reason}")
        elif item.problem in kept:
            results[item.problem] = ProblemResult.of_row(kept[item.problem])
        else:
            todo.append(item.problem)
    limit = _problem_timeout(args)
    print(f"{len(imports)} problems: {len(results)} already done or not imported, {len(todo)} "
          f"to run on {len(where)} slot(s) ({', '.join(s.name for s in where)}), at most "
          f"{limit:.0f} s each; rows in {results_file.path}", flush=True)
    finished = len(results)

    def done(row: dict[str, Any]) -> None:
        nonlocal finished
        finished += 1
        result = results[row["problem"]] = ProblemResult.of_row(row)
        print(f"[{finished}/{len(imports)}] {_progress(result)}", flush=True)

    stopped = False
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        run_jobs(todo, lambda problem, result: child_command(_child_argv(args), problem, result),
                 where, limit, args.out, results_file, done)
    except _Stopped:  # the problems in flight are killed; the report covers those that ended
        stopped = True
    finally:
        signal.signal(signal.SIGTERM, previous)
    ordered = [results.get(item.problem) or ProblemResult(item.problem, NOT_RUN)
               for item in imports]
    command = "python -m benchmarks.kernelbench " + " ".join(
        shlex.quote(a) for a in args.argv)
    return {"command": command, "level": args.level, "language": args.language,
            "device": args.device, "lineages": args.lineages, "minutes": args.minutes,
            "versions": _versions(args.device), "wall_s": time.time() - began,
            "problem_timeout_s": limit, "slots": [s.name for s in where], "stopped": stopped,
            "summary": summarise(ordered), "problems": [asdict(r) for r in ordered]}


def _progress(result: ProblemResult) -> str:
    figures = "" if not result.correct else (
        f", {x_times(result.speedup_vs_compile)} vs compile, {x_times(result.speedup_vs_eager)} vs eager")
    return (f"{result.problem}: {result.status[:160]}{figures} ({result.slot}, "
            f"{result.wall_s:.0f} s)")


_RUN_ONLY = ("--json", "--parallel", "--problem-timeout", "--only", "--first", "--results")


def child_command(argv: list[str], problem: str, result: Path) -> list[str]:
    """The command line of one problem's process: this benchmark with ``--one``."""
    return [sys.executable, "-m", "benchmarks.kernelbench", *argv, "--one", problem, "--result",
            str(result)]


def _child_argv(args: argparse.Namespace) -> list[str]:
    """This invocation's arguments for one problem's process (less what only the run uses)."""
    argv, skip = [], False
    for arg in args.argv:
        if skip:
            skip = False
            continue
        if arg in _RUN_ONLY:
            skip = True
            continue
        if arg == "--resume" or arg.split("=")[0] in _RUN_ONLY:
            continue
        argv.append(arg)
    return argv


def run_one(args: argparse.Namespace) -> int:
    """One problem's process: its search, its row written to ``--result``."""
    from kernelswarm.experiments.kernelbench.jobs import write_stage

    task = args.out / "tasks" / args.one
    began = time.time()
    try:
        result = _search(args, task, args.one, lambda stage: write_stage(args.result, stage))
    except Exception as exc:  # a bug or the machine: the row says what, the run goes on
        import traceback

        traceback.print_exc()
        cause = getattr(exc, "cause", None) or exc  # a Ray task's error: the one it carries
        result = ProblemResult(args.one, f"failed: {type(cause).__name__}: {_line(str(cause))}")
    row = {**asdict(result), "wall_s": round(time.time() - began, 1)}
    args.result.write_text(json.dumps(finite(row), default=str))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    if args.one is not None:
        return run_one(args)
    report = run(args)
    print(table(report), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(finite(report), indent=2, default=str))
    return 0 if report["summary"]["correct"] else 1


if __name__ == "__main__":
    sys.exit(main())
