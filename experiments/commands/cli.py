"""The ``kernelswarm`` command line."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from kernelswarm.search import StartingKernelFailed, TaskError

from ..config import ConfigError, load_config, load_run_config
from .eval import add_eval_parser, run_eval_command
from .sweep import add_sweep_parser, run_sweep_command
from .tasks import add_tasks_parser, run_tasks_command
from .tune import add_tune_parser, run_tune_command


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernelswarm", description="Search for faster, still-correct kernels.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "run", help="run a search (the quickstart when no CONFIG is given)",
        description="Run a search. Results go to a new folder under run.out_dir, to Parquet and "
                    "to MLflow.")
    run.add_argument("config", nargs="?", help="a TOML configuration (default: the quickstart)")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a setting, e.g. --set search.lineages=8 or --set "
                          "agent.llm.base_url=http://localhost:8000/v1 (repeatable)")
    run.add_argument("--address", help="the Ray cluster to join (default: $RAY_ADDRESS, else a "
                                       "local instance)")
    run.add_argument("--task", help="a built-in task name or a task folder (sets task.name)")
    run.add_argument("--resume", metavar="RUN_DIR",
                     help="continue a stopped run in its folder with its configuration (plus any "
                          "--set, e.g. a larger search.candidates_per_lineage); nothing recorded "
                          "is evaluated again")
    add_tasks_parser(commands)
    add_eval_parser(commands)
    add_tune_parser(commands)
    add_sweep_parser(commands)
    report = commands.add_parser(
        "report", help="write an HTML and a markdown report of a run or a sweep folder",
        description="Write RUN_DIR/report/report.html (self-contained: opens with no server) and "
                    "report.md with plots; for a folder of run folders, a sweep report.")
    report.add_argument("folder", metavar="RUN_DIR|SWEEP_DIR")
    return parser


def _report(args: argparse.Namespace, console: Console) -> int:
    from ..report.writer import ReportError, write_report  # imports matplotlib: only when asked

    try:
        report = write_report(args.folder)
    except (ReportError, FileNotFoundError) as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return 2
    # Paths whole, each on its own line: a terminal may wrap them, never cut them.
    console.print("report:", highlight=False)
    console.print(str(report.html), highlight=False, soft_wrap=True, markup=False)
    console.print(str(report.markdown), highlight=False, soft_wrap=True, markup=False)
    return 0


def _run(args: argparse.Namespace, console: Console) -> int:
    overrides = list(args.overrides)
    if args.address:
        overrides.append(f'cluster.address="{args.address}"')
    if args.task:
        overrides.append(f"task.name={json.dumps(args.task)}")  # a TOML string, quotes escaped
        if not args.config and not any(o.split("=", 1)[0].strip() == "run.name"
                                       for o in overrides):
            # The quickstart's settings, the user's task: the run folder and the MLflow
            # experiment are named after the task, not "quickstart".
            name = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(args.task.rstrip("/")).name) or "run"
            overrides.append(f"run.name={json.dumps(name)}")
    if args.resume and args.config:
        raise ConfigError("--resume takes the configuration from the run folder; drop CONFIG "
                          "(use --set to change settings)")
    resume = Path(args.resume) if args.resume else None
    config = load_run_config(resume, overrides) if resume else load_config(args.config, overrides)
    from ..run.runner import run  # imports Ray and MLflow; keep --help and config errors fast

    outcome = run(config, console, resume=resume)
    if outcome.failure is not None:  # the reason is the last line a user or a script sees
        console.print(f"[red]error:[/] {escape(outcome.failure)}", highlight=False,
                      soft_wrap=True)
        return 1
    return 0 if outcome.result.summary.best is not None else 1


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    console = Console()
    try:
        if args.command == "run":
            return _run(args, console)
        if args.command == "tasks":
            return run_tasks_command(args, console)
        if args.command == "eval":
            return run_eval_command(args, console)
        if args.command == "tune":
            return run_tune_command(args, console)
        if args.command == "sweep":
            return run_sweep_command(args, console)
        if args.command == "report":
            return _report(args, console)
    except (ConfigError, TaskError) as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return 2
    except StartingKernelFailed as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
