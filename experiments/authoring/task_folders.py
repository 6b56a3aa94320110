"""Task folders listed, scaffolded from the template and checked: what ``kernelswarm tasks``,
``tasks new`` and ``tasks check`` do, below the command that prints it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from kernelswarm.search import Task, TaskError, load_task

from ..config import BUILTIN_TASKS
from ..run.compiler_messages import naming_the_users_file
from .task_template import KERNEL_CPP, TASK_PY

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class TaskListing:
    """One row of ``kernelswarm tasks``."""

    folder: Path
    name: str
    languages: tuple[str, ...]
    shapes: dict[str, tuple[int, int] | None]  # device -> (tuning, held-out); None: none there
    problem: str = ""  # why the task does not load


def shape_counts(task: Task) -> tuple[int, int]:
    """(tuning, held-out) shapes of a loaded task."""
    return len(task.tuning_shapes), len(task.heldout_shapes)


def list_tasks(extra: Sequence[Path] = ()) -> list[TaskListing]:
    """The built-in tasks (and ``extra`` folders), each loaded for every device."""
    folders = sorted(p for p in BUILTIN_TASKS.iterdir() if (p / "task.py").is_file())
    folders += [p for p in extra if p.resolve() not in {f.resolve() for f in folders}]
    listings = []
    for folder in folders:
        loaded: dict[str, Task | TaskError] = {}
        for device in DEVICES:
            try:
                loaded[device] = load_task(folder, device)
            except TaskError as exc:
                loaded[device] = exc
        tasks = [t for t in loaded.values() if isinstance(t, Task)]
        if not tasks:
            listings.append(TaskListing(folder, folder.name, (), dict.fromkeys(DEVICES),
                                        problem=str(loaded["cpu"])))
            continue
        shapes = {d: shape_counts(t) if isinstance(t, Task) else None for d, t in loaded.items()}
        listings.append(TaskListing(folder, tasks[0].name, tuple(sorted(tasks[0].kernels)),
                                    shapes))
    return listings


def scaffold_task(name: str, parent: Path) -> Path:
    """Write ``parent/name`` from the elementwise template; refuses an existing folder."""
    if not _IDENTIFIER.match(name):
        raise TaskError(f"task name {name!r}: must be a C identifier (letters, digits, _), as it "
                        f"is also the kernel's entry point")
    folder = parent.expanduser().resolve() / name
    if folder.exists():
        raise TaskError(f"{folder}: already exists; pick another name or --dir")
    folder.mkdir(parents=True)
    (folder / "task.py").write_text(TASK_PY.substitute(name=name))
    (folder / f"{name}.cpp").write_text(KERNEL_CPP.substitute(name=name))
    return folder


def check_task(path: str | Path, device: str = "cpu") -> Task:
    """Load ``path`` and check it further than loading does; ``TaskError`` on the first problem.

    Kernel entries are checked by their language's spec (``load_task``); on the cpu, every
    shape's ``make_inputs``, ``make_outputs`` and ``reference`` are called, and the reference's
    outputs must match ``make_outputs`` in count, shape and dtype.
    """
    task = load_task(path, device)
    where = task.path / "task.py"
    if device != "cpu":
        return task
    for shape in (*task.tuning_shapes, *task.heldout_shapes):
        problem = _structure(task, dict(shape))
        if problem:
            raise TaskError(f"{where}: on shape {shape.label}: {problem}")
    return task


def _structure(task: Task, shape: dict) -> str | None:
    """Why ``shape``'s reference does not match ``make_outputs``, or an error calling either."""
    from kernelswarm.evaluators import structure_problem  # imports torch

    module = task.module
    steps = (("make_inputs", lambda: tuple(module.make_inputs(shape, 0, "cpu"))),
             ("make_outputs", lambda: tuple(module.make_outputs(shape, "cpu"))))
    values = []
    for name, step in steps:
        try:
            values.append(step())
        except Exception as exc:
            return f"{name}() raised {type(exc).__name__}: {exc}"
    inputs, outputs = values
    try:
        reference = tuple(module.reference(*inputs))
    except Exception as exc:
        return f"reference() raised {type(exc).__name__}: {exc}"
    problem = structure_problem(outputs, reference)
    return f"make_outputs() and reference() disagree: {problem}" if problem else None


def evaluate_starting_kernels(task: Task, device: str, console: Console) -> bool:
    """Run each starting kernel that runs on ``device`` through the evaluator; all OK?"""
    from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator
    from kernelswarm.search import SPECS, StartingKernelFailed, Status

    settings = EvaluatorSettings(device=device, timing_budget_s=0.05, min_repeats=3,
                                 flush_cache=False)
    all_ok, ran = True, 0
    for language in sorted(task.kernels):
        if not SPECS[language].runs_on(device):
            continue
        ran += 1
        start = task.starting_candidate(language)
        with SandboxEvaluator(task.path, language, settings) as evaluator:
            try:
                evaluation = evaluator.evaluate(start)
            except StartingKernelFailed as failed:  # found as the evaluator calibrated
                evaluation = failed.evaluation
        evaluation = naming_the_users_file(evaluation, task, start)
        colour = "green" if evaluation.status is Status.OK else "red"
        console.print(f"starting {language} kernel: [{colour}]{evaluation.status.value}[/] "
                      f"{escape(evaluation.message)}", highlight=False)
        all_ok &= evaluation.status is Status.OK
    if not ran:
        console.print(f"no starting kernel of this task runs on {device}", highlight=False)
    return all_ok
