"""The ``kernelswarm`` command line.

Only the command given is imported: ``kernelswarm --help`` and ``--version`` load nothing beyond
the standard library, and each command loads torch, Ray, MLflow or matplotlib only once it has
checked its arguments and needs them (tests/experiments/test_cli_startup.py holds it to that).
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import os
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any


@dataclass(frozen=True)
class Command:
    """A subcommand: its line in ``kernelswarm --help``, and the module (of this package) that
    defines its arguments (``add_parser``) and runs it (``run``, given the parsed arguments and
    a rich Console, returning the exit status)."""

    help: str
    module: str
    add_parser: str
    run: str


# In the order ``kernelswarm --help`` lists them.
COMMANDS: dict[str, Command] = {
    "run": Command("run a search (the quickstart when no CONFIG is given)",
                   "run", "add_run_parser", "run_search_command"),
    "tasks": Command("list, scaffold, check and import tasks",
                     "tasks", "add_tasks_parser", "run_tasks_command"),
    "eval": Command("evaluate one kernel file against a task (does it beat the baseline?)",
                    "eval", "add_eval_parser", "run_eval_command"),
    "tune": Command("tune one kernel's knobs with Optuna, trials in parallel on every GPU",
                    "tune", "add_tune_parser", "run_tune_command"),
    "sweep": Command("run every cell of a sweep file on one cluster and one pool of workers",
                     "sweep", "add_sweep_parser", "run_sweep_command"),
    "report": Command("write an HTML and a markdown report of a run or a sweep folder",
                      "report", "add_report_parser", "run_report_command"),
    "runs": Command("list past runs (date, task, device, status, best speedups), or compare two",
                    "runs", "add_runs_parser", "run_runs_command"),
}


def package_version() -> str:
    """The installed kernelswarm's version (pyproject.toml's), or "unknown" outside an install."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kernelswarm")
    except PackageNotFoundError:
        return "unknown"


class _Version(argparse.Action):
    """``--version``: the version is looked up only when asked (a metadata scan costs time)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print kernelswarm's version and exit", **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(f"kernelswarm {package_version()}")
        parser.exit()


INTERRUPTED_STATUS = 130  # 128 + SIGINT, as experiments/run/execute.py's run exits after Ctrl-C


def command_given(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names: its first word that is not an option (the top level's own
    options take no value, so nothing before the command can be one)."""
    return next((word for word in argv if not word.startswith("-")), None)


def _module(command: Command) -> ModuleType:
    return importlib.import_module(f"{__package__}.{command.module}")


def parser_for(chosen: str | None) -> argparse.ArgumentParser:
    """The command line's parser with the arguments of command ``chosen`` (its module
    imported); every other command is registered by name and help line only."""
    parser = argparse.ArgumentParser(
        prog="kernelswarm", description="Search for faster, still-correct kernels.")
    parser.add_argument("--version", action=_Version)
    commands = parser.add_subparsers(dest="command", required=True)
    for name, command in COMMANDS.items():
        if name == chosen:
            getattr(_module(command), command.add_parser)(commands)
        else:
            commands.add_parser(name, help=command.help)
    return parser


def _exit_status(exc: Exception) -> int | None:
    """The exit status of an error a user can act on: 2 for a configuration, a task or
    arguments that cannot be used, 1 for a starting kernel that fails its own task; None for a
    bug (raised again, with its traceback)."""
    from kernelswarm.search import StartingKernelFailed, TaskError

    from ..config import ConfigError

    if isinstance(exc, (ConfigError, TaskError)):
        return 2
    if isinstance(exc, StartingKernelFailed):
        return 1
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    chosen = command_given(argv)
    args = parser_for(chosen if chosen in COMMANDS else None).parse_args(argv)
    from rich.console import Console
    from rich.markup import escape

    console = Console()
    command = COMMANDS[args.command]
    try:
        return getattr(_module(command), command.run)(args, console)
    except KeyboardInterrupt:
        # Ctrl-C where a command does not stop cleanly itself (a search does, and says what it
        # kept): one line, no traceback, and a shell's status for a command it stopped
        console.print("[yellow]interrupted[/]", highlight=False)
        return INTERRUPTED_STATUS
    except Exception as exc:
        status = _exit_status(exc)
        if status is None:
            raise
        console.print(f"[red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return status


if __name__ == "__main__":
    sys.exit(main())


def console_main() -> None:
    """The ``kernelswarm`` program: ``main``'s status, without the interpreter's teardown.

    A run leaves torch, Ray, MLflow and SQLAlchemy loaded; freeing their objects one by one at
    exit (the final garbage collection of ``Py_FinalizeEx``) took 1.0 to 1.6 s on 2 cores after
    the last line was printed. What an exit does for others is still done, in the order Python
    does it: threads that are not daemons are waited for, then every ``atexit`` function (Ray's
    shutdown, MLflow's, logging's), then the standard streams are flushed. A command that raises
    exits as Python does, with its traceback.
    """
    status = main()
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)

