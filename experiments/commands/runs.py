"""``kernelswarm runs [DIR]`` and ``kernelswarm runs compare A B``: past runs from the command
line, read from their folders' ``summary.json`` (views/past_runs.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from ..config import ConfigError

DEFAULT_DIR = "runs"  # run.out_dir of the quickstart and of tune's defaults


def add_runs_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "runs", help="list past runs (date, task, device, status, best speedups), or compare two",
        description="kernelswarm runs [DIR]: one line per run folder in DIR (run, tune, and a "
                    "sweep folder's cells), oldest first: date, task, language, device, "
                    "status, the best kernel over its starting kernel and over the best "
                    "baseline, wall time. kernelswarm runs compare A B: two run folders side "
                    "by side, shape by shape. Read from each folder's summary.json.",
        usage="kernelswarm runs [DIR]\n       kernelswarm runs compare A B")
    parser.add_argument("args", nargs="*", metavar="DIR | compare A B",
                        help=f"the folder of run folders (default: {DEFAULT_DIR}, the "
                             f"quickstart's run.out_dir; sweeps: the sweep folder, or the "
                             f"folder above it); for compare, two run folders, by path or "
                             f"by name in {DEFAULT_DIR}/")


def _run_folder(given: str) -> Path:
    from ..views.past_runs import is_run_folder

    for path in (Path(given).expanduser(), Path(DEFAULT_DIR) / given):
        if is_run_folder(path):
            return path.resolve()
    raise ConfigError(f"{given}: not a run folder (a folder with config.json), by path or by "
                      f"name in {DEFAULT_DIR}/; kernelswarm runs lists them")


def run_runs_command(args: argparse.Namespace, console: Console) -> int:
    from ..views.past_runs import compare_view, find_runs, read_run

    given = list(args.args)
    if given[:1] == ["compare"]:
        if len(given) != 3:
            raise ConfigError("runs compare takes two run folders: kernelswarm runs compare A B")
        a, b = (read_run(_run_folder(name)) for name in given[1:])
        console.print(compare_view(a, b, console.width))
        return 0
    if len(given) > 1:
        raise ConfigError("runs takes one folder (kernelswarm runs [DIR]), or compare A B")
    root = Path(given[0] if given else DEFAULT_DIR).expanduser()
    if not root.is_dir():
        raise ConfigError(f"{root}: no such folder (run folders go under run.out_dir, "
                          f"{DEFAULT_DIR}/ unless a configuration says otherwise: give it as DIR)")
    from ..views.past_runs import list_table

    found = find_runs(root.resolve())
    if not found.runs:
        console.print(f"no run folders in {found.root}", highlight=False, soft_wrap=True,
                      markup=False)
        return 0
    console.print(list_table(found, console.width))
    return 0
