"""``kernelswarm tasks import-flashinfer`` and ``export-flashinfer``: FlashInfer-Trace in and out.

    kernelswarm tasks import-flashinfer DEFINITION.json WORKLOADS.jsonl DIR
    kernelswarm tasks export-flashinfer TASK (KERNEL | --run RUN_DIR) OUT

See experiments/flashinfer/trace.py (the task a definition becomes) and
experiments/flashinfer/export.py (the solution and traces written back).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from kernelswarm.search import TaskError

from ..flashinfer.trace import TOLERANCE


def add_flashinfer_parsers(sub: argparse._SubParsersAction) -> None:
    """Register the two subcommands under ``tasks``."""
    imp = sub.add_parser("import-flashinfer", help="a task folder from a FlashInfer-Trace "
                                                   "definition and its workloads",
                         description="Write DIR: the definition, its workloads, its reference, "
                                     "a task.py with one shape per workload, and a cpp kernel.")
    imp.add_argument("definition", help="the definition JSON file")
    imp.add_argument("workloads", help="the workloads JSONL file")
    imp.add_argument("dir", help="the task folder to create (must not exist, or be empty)")
    imp.add_argument("--cpp", help="the starting cpp kernel (default: a stub to fill in)")
    imp.add_argument("--cpu-workloads", type=int, default=2,
                     help="how many of the smallest workloads are cpu shapes (default 2)")
    imp.add_argument("--cpu-axis", action="append", default=[], metavar="AXIS=VALUE",
                     help="set a var axis of the cpu shapes (random inputs only; repeatable)")
    imp.add_argument("--heldout-every", type=int, default=4,
                     help="every Nth workload is held out on cuda (default 4; 0: none)")
    imp.add_argument("--tolerance", type=float, default=TOLERANCE,
                     help=f"atol and rtol for every dtype (default {TOLERANCE})")
    exp = sub.add_parser("export-flashinfer", help="a kernel as a FlashInfer-Trace solution "
                                                   "with one trace per workload",
                         description="Judge the kernel on every workload of the device and "
                                     "write OUT/solutions/..., OUT/traces/... and OUT/logs/...")
    exp.add_argument("task", help="a task folder written by import-flashinfer")
    exp.add_argument("kernel", nargs="?", help="the kernel file (e.g. RUN_DIR/best/<id>.cpp)")
    exp.add_argument("out", help="the dataset folder to write into")
    exp.add_argument("--run", help="export this run folder's best kernel")
    exp.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    exp.add_argument("--author", default="kernelswarm")
    exp.add_argument("--hardware", help="the target_hardware name (default: the device's)")


def run_flashinfer_command(args: argparse.Namespace, console: Console) -> int:
    """Run import-flashinfer or export-flashinfer; the exit status."""
    if args.tasks_command == "import-flashinfer":
        return _import(args, console)
    return _export(args, console)


def _import(args: argparse.Namespace, console: Console) -> int:
    from ..flashinfer.trace import import_definition

    axes = {}
    for item in args.cpu_axis:
        name, _, value = item.partition("=")
        if not value.strip().isdigit():
            raise TaskError(f"--cpu-axis {item!r}: expected AXIS=VALUE with a positive integer")
        axes[name.strip()] = int(value)
    source = Path(args.cpp).read_text() if args.cpp else None
    imported = import_definition(args.definition, args.workloads, args.dir, cpp_source=source,
                                 cpu_workloads=args.cpu_workloads, cpu_axes=axes,
                                 heldout_every=args.heldout_every, tolerance=args.tolerance)
    task = imported.task
    console.print(f"wrote {task.path}: task {task.name!r}; cpu workloads "
                  f"{', '.join(imported.cpu)}; {len(imported.heldout)} of the cuda workloads "
                  f"held out", highlight=False, markup=False)
    console.print("the cpp entry point:\n" + task.module.c_signature(), highlight=False,
                  markup=False)
    return 0


def _export(args: argparse.Namespace, console: Console) -> int:
    from ..config import ConfigError
    from ..flashinfer.export import export_solution
    from ..run.folder import open_run_folder

    settings = None
    if args.run:
        if args.kernel:
            raise TaskError("give KERNEL or --run RUN_DIR, not both")
        try:
            run = open_run_folder(Path(args.run))
            kernel = run.best_file()
        except ConfigError as exc:
            raise TaskError(str(exc)) from None
        settings = run.settings
    elif args.kernel:
        kernel = Path(args.kernel)
    else:
        raise TaskError("export-flashinfer: give the kernel file or --run RUN_DIR")
    solution, traces, evaluation = export_solution(
        args.task, kernel, args.out, device=args.device, author=args.author, settings=settings,
        hardware=args.hardware)
    console.print(f"wrote {solution} and {len(evaluation.shapes)} traces to {traces}",
                  highlight=False, markup=False)
    return 0
