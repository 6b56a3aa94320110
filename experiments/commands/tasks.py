"""``kernelswarm tasks``: list the tasks, scaffold a new one, check a folder, import KernelBench.

    kernelswarm tasks [--config C]                  the built-in tasks (and the config's)
    kernelswarm tasks new NAME [--dir D]            a folder D/NAME that already evaluates
    kernelswarm tasks check PATH [--evaluate]       the first problem of a task folder
    kernelswarm tasks import-kernelbench FILE DIR   a task folder from a KernelBench problem
    kernelswarm tasks import-kernelbench KB [DIR] --level N   a whole level, one folder each
    kernelswarm tasks import-flashinfer DEF WORKLOADS DIR    a FlashInfer-Trace definition
    kernelswarm tasks export-flashinfer TASK KERNEL OUT      a kernel as a solution + traces
    kernelswarm tasks start DIR --from-compile [--language L]  a start from torch.compile

A broken task raises ``TaskError`` naming the part that is wrong; the CLI prints it and exits 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kernelswarm.search import SPECS, Status, TaskError

from ..authoring.compiled_start import LANGUAGES as COMPILED_START_LANGUAGES
from ..authoring.compiled_start import StartResult
from ..authoring.task_folders import (
    DEVICES,
    check_task,
    evaluate_starting_kernels,
    list_tasks,
    scaffold_task,
    shape_counts,
)
from ..config import BUILTIN_TASKS, load_config
from ..kernelbench.problem import Shrink
from .flashinfer import add_flashinfer_parsers, run_flashinfer_command


def add_tasks_parser(commands: argparse._SubParsersAction) -> None:
    """Register ``tasks`` and its subcommands on the CLI's subparsers."""
    tasks = commands.add_parser(
        "tasks", help="list, scaffold, check and import tasks",
        description="Without a subcommand: list the built-in tasks with their languages and "
                    "CPU/GPU shape counts.")
    tasks.add_argument("--config", help="also list the task this configuration names")
    sub = tasks.add_subparsers(dest="tasks_command")
    new = sub.add_parser("new", help="scaffold a task folder that already evaluates",
                         description="Write DIR/NAME: a small elementwise op (out = alpha*x + y) "
                                     "with a cpp starting kernel, to adapt to your op.")
    new.add_argument("name", help="the task's name: a C identifier (also the entry point)")
    new.add_argument("--dir", default=".", help="where to create the folder (default: here)")
    check = sub.add_parser("check", help="load a task folder and report its first problem",
                           description="Load the task, check its kernel specs, and call "
                                       "make_inputs/make_outputs/reference on every CPU shape.")
    check.add_argument("path", help="a task folder (or its task.py)")
    check.add_argument("--device", choices=DEVICES, default="cpu",
                       help="whose shapes to load (calls are made on the cpu only)")
    check.add_argument("--evaluate", action="store_true",
                       help="also run each starting kernel that runs on the device through the "
                            "evaluator (a few seconds)")
    kb = sub.add_parser("import-kernelbench", help="task folders from KernelBench problems",
                        description="Write DIR with the problem file, a task.py whose reference "
                                    "is the problem's Model.forward, and a cpp starting kernel; "
                                    "with --level, one such folder per problem of a level of a "
                                    "KernelBench checkout, and a table of those not imported.")
    kb.add_argument("file", help="the problem file (defines Model, get_inputs, "
                                 "get_init_inputs); with --level, a KernelBench checkout")
    kb.add_argument("dir", nargs="?", help="the task folder to create (must not exist, or be "
                                           "empty); with --level, where the folders go "
                                           "(default: kernelbench_levelN)")
    kb.add_argument("--level", type=int, help="import every problem of this level")
    kb.add_argument("--only", action="append", default=[], metavar="PREFIX",
                    help="with --level, only files whose name starts with PREFIX, e.g. 19_ "
                         "(repeatable)")
    kb.add_argument("--cpp", help="the starting cpp kernel (default: a stub to fill in)")
    kb.add_argument("--size", action="append", default=[], metavar="NAME=VALUE",
                    help="set a size constant of the cpu shapes, e.g. batch_size=8; constants "
                         "computed from it follow (repeatable)")
    kb.add_argument("--no-shrink", dest="shrink", action="store_false",
                    help="keep the file's sizes on the cpu (default: sizes of 32 and more are "
                         "halved until a cpu shape moves at most 4 MiB and does at most 2e8 "
                         "flops)")
    kb.add_argument("--atol", type=float, help="absolute tolerance, at most KernelBench's 1e-2 "
                                               "(the default)")
    kb.add_argument("--rtol", type=float, help="relative tolerance, at most KernelBench's 1e-2 "
                                               "(the default)")
    add_flashinfer_parsers(sub)
    start = sub.add_parser(
        "start", help="write a task's starting kernel from torch.compile",
        description="Compile the task's reference with torch.compile (Inductor) at each of its "
                    "shapes and the built-in tester's, write the generated code as the task's "
                    "starting kernel (a version per shape), and judge it.")
    start.add_argument("path", help="the task folder")
    start.add_argument("--from-compile", action="store_true", required=True,
                       help="generate the start from Inductor's code (the only source so far)")
    start.add_argument("--language", choices=COMPILED_START_LANGUAGES, default="cpp",
                       help="a language Inductor writes code in, generated on its device: "
                            + ", ".join(f"{n} ({SPECS[n].inductor_device})"
                                        for n in COMPILED_START_LANGUAGES)
                            + " (a GPU's code needs a GPU here)")
    start.add_argument("--force", action="store_true",
                       help="replace a kernel that was not generated (kept as FILE.orig)")
    start.add_argument("--no-evaluate", dest="evaluate", action="store_false",
                       help="write the kernel without judging it")


def run_tasks_command(args: argparse.Namespace, console: Console) -> int:
    """Run ``kernelswarm tasks ...``; the exit status."""
    if args.tasks_command == "new":
        folder = scaffold_task(args.name, Path(args.dir))
        console.print(f"wrote {folder}; check it with: kernelswarm tasks check {folder} "
                      f"--evaluate", highlight=False, markup=False)
        return 0
    if args.tasks_command == "check":
        return _check(args, console)
    if args.tasks_command == "import-kernelbench":
        return _import_kernelbench(args, console)
    if args.tasks_command == "start":
        from ..authoring.compiled_start import start_from_compile

        result = start_from_compile(args.path, args.language, force=args.force,
                                    evaluate=args.evaluate)
        return _print_start(result, console)
    if args.tasks_command in ("import-flashinfer", "export-flashinfer"):
        return run_flashinfer_command(args, console)
    console.print(task_table(args.config))
    return 0


def task_table(config: str | None = None) -> Table:
    """``list_tasks`` as a table (the configuration's task added when one is given)."""
    extra = [load_config(config).task_path()] if config else []
    table = Table(title="tasks", title_justify="left")
    for column in ("task", "languages", "CPU shapes", "GPU shapes", "where"):
        # a task's name whole (it is what `run --task` takes); a folder may fold
        table.add_column(column, no_wrap=column == "task",
                         overflow="fold" if column == "where" else "ellipsis")
    builtin = BUILTIN_TASKS.resolve()
    for item in list_tasks(extra):
        cells = [_shape_cell(item.shapes[d]) for d in DEVICES]
        where = "built-in" if item.folder.resolve().parent == builtin else str(item.folder)
        languages = ", ".join(item.languages) or f"[red]broken:[/] {escape(item.problem)}"
        table.add_row(escape(item.name), languages, *cells, escape(where))
    table.caption = "shapes: tuning + held-out"
    return table


def _shape_cell(counts: tuple[int, int] | None) -> str:
    return "-" if counts is None else f"{counts[0]} + {counts[1]}"


def _check(args: argparse.Namespace, console: Console) -> int:
    task = check_task(args.path, args.device)
    counts = shape_counts(task)
    described = (f"task {task.name!r} ({task.path}): languages "
                 f"{', '.join(sorted(task.kernels))}; {args.device}: {counts[0]} tuning + "
                 f"{counts[1]} held-out shapes")
    if not args.evaluate:
        console.print(f"ok: {described}", highlight=False, markup=False)
        return 0
    # "ok" only once its starting kernels have passed too
    console.print(described, highlight=False, markup=False)
    if not evaluate_starting_kernels(task, args.device, console):
        return 1
    console.print(f"ok: task {task.name!r}", highlight=False, markup=False)
    return 0


def _import_kernelbench(args: argparse.Namespace, console: Console) -> int:
    from ..kernelbench.problem import SHRINK, import_problem

    shrink = SHRINK if args.shrink else None
    if args.level is not None:
        return _import_level(args, shrink, console)
    if args.dir is None:
        raise TaskError("import-kernelbench FILE DIR: DIR, the task folder to create, is missing "
                        "(or give --level N to import a whole level)")
    sizes = {}
    for item in args.size:
        name, _, value = item.partition("=")
        if not value.strip().isdigit():
            raise TaskError(f"--size {item!r}: expected NAME=VALUE with a positive integer")
        sizes[name.strip()] = int(value)
    source = None
    if args.cpp:
        try:
            source = Path(args.cpp).read_text()
        except OSError as exc:
            raise TaskError(f"--cpp {args.cpp}: cannot be read: {exc}") from None
    imported = import_problem(args.file, args.dir, cpp_source=source, sizes=sizes,
                              shrink=shrink, atol=args.atol, rtol=args.rtol)
    task = imported.task
    console.print(f"wrote {task.path}: task {task.name!r}, cpu shapes "
                  f"{', '.join(s.label for s in task.tuning_shapes)}", highlight=False,
                  markup=False)
    if imported.cpu_sizes:
        console.print("cpu sizes (the cuda shapes keep the file's): " + ", ".join(
            f"{n} {a} -> {b}" for n, (a, b) in imported.cpu_sizes.items()), highlight=False,
            markup=False)
    for label in imported.dropped_heldout:
        console.print(f"no held-out shape {label}: the model cannot run there", highlight=False,
                      markup=False)
    console.print("the cpp entry point:\n" + task.module.c_signature(), highlight=False,
                  markup=False)
    if source is None:
        console.print(f"write the kernel in {task.path / 'kernel.cpp'}, then: kernelswarm tasks "
                      f"check {task.path} --evaluate", highlight=False, markup=False)
    return 0


def _import_level(args: argparse.Namespace, shrink: Shrink | None, console: Console) -> int:
    from ..kernelbench.level import ImportStatus, import_level, level_table

    if args.cpp or args.size:
        raise TaskError("--cpp and --size name one problem's kernel and sizes; with --level, "
                        "import the level, then edit each folder (or import one file)")
    dest = Path(args.dir or f"kernelbench_level{args.level}")
    results = import_level(args.file, args.level, dest, shrink=shrink,
                           atol=args.atol, rtol=args.rtol, only=args.only)
    console.print(level_table(results, args.level))
    imported = sum(r.status is ImportStatus.IMPORTED for r in results)
    console.print(f"{imported} task folders in {dest.resolve()}", highlight=False, markup=False)
    return 0 if imported else 1


def _print_start(result: StartResult, console: Console) -> int:
    """Print what ``start_from_compile`` made; the exit status (1 when the kernel failed)."""
    console.print(f"wrote {result.path}: a {result.language} start from torch.compile with a "
                  f"version for each of {len(result.shapes)} shapes: {', '.join(result.shapes)}",
                  highlight=False, markup=False)
    if result.backup is not None:
        console.print(f"the previous kernel is in {result.backup}", highlight=False,
                      markup=False)
    if result.knobs:
        console.print("knobs: " + ", ".join(f"{k} {list(v)}" for k, v in result.knobs),
                      highlight=False, markup=False)
    if result.knobs_note:
        console.print(result.knobs_note, highlight=False, markup=False)
    for skipped in result.skipped:
        console.print(f"no version for the tester's check shape {skipped}", highlight=False,
                      markup=False)
    if result.status is None:
        console.print(result.message, highlight=False, markup=False)
        return 0
    colour = "green" if result.status is Status.OK else "red"
    console.print(f"judged: [{colour}]{result.status.value}[/] {escape(result.message)}",
                  highlight=False)
    return 0 if result.status is Status.OK else 1
