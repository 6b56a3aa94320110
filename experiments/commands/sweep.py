"""``kernelswarm sweep``: its arguments and what it prints on a bad sweep file."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from ..config import ConfigError


def add_sweep_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "sweep", help="run every cell of a sweep file on one cluster and one pool of workers",
        description="Run a sweep: a base configuration and axes (tasks, languages, agents, "
                    "models, lineages, seeds, any setting), as a grid or listed cells, every "
                    "cell searched on one Ray cluster and one shared pool of evaluation "
                    "workers. Results: a sweep folder with a run folder per cell, "
                    "cells.parquet, and an MLflow run per cell nested under the sweep's run.")
    parser.add_argument("sweep_file", nargs="?", metavar="SWEEP.toml",
                        help="the sweep file (see docs/cluster.md), or a ready one by name: "
                             "sweep_cpu (two tasks on this machine's CPU), sweep_gpu")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE",
                        help="override a setting of every cell, e.g. --set "
                             "search.candidates_per_lineage=4 (repeatable)")
    parser.add_argument("--address", help="the Ray cluster to join (default: $RAY_ADDRESS, "
                                          "else a local instance)")
    parser.add_argument("--resume", metavar="SWEEP_DIR",
                        help="finish the unfinished cells of a sweep folder; nothing recorded "
                             "is evaluated again")


def run_sweep_command(args: argparse.Namespace, console: Console) -> int:
    if args.resume and (args.sweep_file or args.overrides):
        raise ConfigError("--resume takes the cells and their settings from the sweep folder's "
                          "sweep.json; drop SWEEP.toml and --set")
    if not args.resume and not args.sweep_file:
        raise ConfigError("sweep needs SWEEP.toml, or --resume SWEEP_DIR")
    from ..sweep.sweep_file import load_sweep

    spec = None if args.resume else load_sweep(args.sweep_file, args.overrides)
    from ..sweep.execute import sweep  # imports Ray and MLflow: a bad sweep file is refused before

    outcome = sweep(spec, console, resume=Path(args.resume) if args.resume else None,
                    address=args.address)
    return 0 if outcome.ok else 1
