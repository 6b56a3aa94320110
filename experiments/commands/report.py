"""``kernelswarm report RUN_DIR|SWEEP_DIR``: write a run's (or a sweep's) report again."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.markup import escape


def add_report_parser(commands: argparse._SubParsersAction) -> None:
    report = commands.add_parser(
        "report", help="write an HTML and a markdown report of a run or a sweep folder",
        description="Write RUN_DIR/report/report.html (self-contained: opens with no server) and "
                    "report.md with plots; for a folder of run folders, a sweep report; for a "
                    "tune folder, its trials.")
    report.add_argument("folder", metavar="RUN_DIR|SWEEP_DIR")


def run_report_command(args: argparse.Namespace, console: Console) -> int:
    # imports matplotlib: only when asked
    from ..report.writer import ReportError, write_report
    from ..tune.folder import is_tune_folder
    from ..tune.report import write_tune_report

    try:
        # a knob study's folder has trials, not lineages: its own report (tune/report.py)
        write = write_tune_report if is_tune_folder(Path(args.folder)) else write_report
        report = write(args.folder)
    except (ReportError, FileNotFoundError) as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return 2
    # Paths whole, each on its own line: a terminal may wrap them, never cut them.
    console.print("report:", highlight=False)
    console.print(str(report.html), highlight=False, soft_wrap=True, markup=False)
    console.print(str(report.markdown), highlight=False, soft_wrap=True, markup=False)
    return 0
