"""Once per evaluator, before any candidate: a runner that never loads candidate code.

It measures the machine and the baselines (``figures.acquire_baselines``), then loads the
starting kernel in the candidate's place and goes through the candidates' protocol: the checks
on every tuning shape (a starting kernel that fails its own task, there or in the runner's
start-up, is ``StartingKernelFailed`` with its verdict: start_verdict.py), the
tester's extra checks (one the starting kernel fails, or the task cannot set up, is dropped with
the reason), and the timing of every tuning shape, whose starting-kernel medians and null-batch
costs are the clean figures later candidates are cross-checked against. The runner is then
killed; the arena's size and the memory plan (evaluators/judge/memory_plan.py: the
references' budget, whether a spare runner is started in advance, or a ``MemoryPlanError``
before any runner starts) are fixed here for the evaluator's lifetime.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from ...search import Candidate, Shape, StartingKernelFailed, Task
from ..baselines.baselines import measured_once
from ..languages import KernelLanguage
from ..languages.compile_cache import Build
from ..measure.device_arena import evaluation_arena
from ..protocol import REFILL_SEED, START, layout
from ..settings import EvaluatorSettings
from .calibration_cache import calibration_path, keep_calibration, read_calibration
from .checks import Checker, arena_bytes
from .deadlines import Deadline
from .figures import Calibration, acquire_baselines
from .memory_plan import (
    EvaluationSizes,
    MemoryPlan,
    TimedProblem,
    device_memory_bytes,
    plan_memory,
)
from .references import References, release_device_memory
from .runner_process import SandboxError
from .spares import Spares
from .start_verdict import (
    CalibrationRunner,
    fault_after_loading,
    start_failed,
    stop_after_loading,
)
from .timing import CleanFigures, ShapeTimer, l2_bytes, returned_copies
from .trial import CandidateFault, Stopped, Trial


class EvaluatorSetup(Protocol):
    """What calibration needs of the evaluator (evaluators/judge/evaluator.py): the task, the
    language, the settings and the starting kernel it judges with, and its runners' limits."""

    task: Task
    language: KernelLanguage
    settings: EvaluatorSettings
    start_candidate: Candidate

    def startup_s(self) -> float: ...

    def run_deadline(self) -> Deadline: ...


def prepare_message(setup: EvaluatorSetup, start: Build) -> dict[str, Any]:
    """The ``prepare`` request every runner of the evaluator gets when it is spawned."""
    settings = {**asdict(setup.settings), "cache_dir": str(setup.settings.cache_dir)}
    return {"type": "prepare", "task": str(setup.task.path),
            "language": setup.language.name, "settings": settings,
            "start": {"artifact": str(start.artifact), "entry": setup.start_candidate.entry,
                      "spec": setup.start_candidate.spec_dict}}


def load_start(trial: Trial, prepare: dict[str, Any]) -> None:
    """The starting kernel loaded in ``trial``'s runner in the candidate's place (``prepare``:
    the runner's ``prepare`` request, which names the starting kernel's build)."""
    start = prepare["start"]
    target = {**start, "artifact": trial.runner.stage(Path(start["artifact"]))}
    trial.call_problem(trial.ask({"type": "load", **target}, "loaded"), "loading", "")


@dataclass
class ExtraChecks:
    """The tester's extra checks: those kept (each with its label) and why each other one was
    dropped (by label; the task cannot set it up, or the starting kernel fails it)."""

    usable: list[tuple[dict[str, Any], str]]
    dropped: dict[str, str]


def _extra_shapes(setup: EvaluatorSetup, references: References) -> ExtraChecks:
    """The extra checks the task can set up (with their labels), and why the others cannot."""
    usable, dropped = [], {}
    for check in setup.settings.extra_checks:
        shape = Shape.of(check["shape"])
        label = shape.label + (f",scale={check['scale']:g}" if check["scale"] != 1.0 else "")
        try:
            for seed in (0, REFILL_SEED):
                references.get(shape, seed, check["scale"])
            references.outputs_template(shape)
        except Exception as exc:  # the task's own code refused the shape
            dropped[label] = f"the task cannot run it: {type(exc).__name__}: {exc}"[:500]
            continue
        usable.append(({"shape": shape, "scale": check["scale"]}, label))
    return ExtraChecks(usable, dropped)


def plan(setup: EvaluatorSetup, references: References, extra: ExtraChecks) -> MemoryPlan:
    """The arena's size and the memory plan, from the problems' sizes (each drawn once); the
    references' budget follows the plan. ``MemoryPlanError`` where it cannot fit."""
    task, settings = setup.task, setup.settings
    seeds = [*range(settings.seeds), REFILL_SEED]
    shapes = [*task.tuning_shapes, *task.heldout_shapes, *(c["shape"] for c, _ in extra.usable)]
    l2 = l2_bytes(settings)
    timed, checked = [], 0
    for shape in task.tuning_shapes:
        inputs, outputs = (layout(x)[1] for x in references.described(shape, 0))
        timed.append((shape, TimedProblem(inputs, outputs)))
    for shape in shapes:
        for seed in seeds:
            checked = max(checked, layout([*(x for d in references.described(shape, seed)
                                              for x in d)])[1])
    size = arena_bytes(references, shapes, seeds,
                       [(s, returned_copies(settings, p.footprint, l2)) for s, p in timed])
    made = plan_memory(device_memory_bytes(settings.device),
                       EvaluationSizes([p for _, p in timed], checked, size, l2),
                       references.budget_bytes)
    references.set_budget(made.references_budget)
    return made


def calibrate(setup: EvaluatorSetup, start: Build, references: References,
              spares: Callable[[int, bool], Spares]) -> tuple[Calibration, Spares, MemoryPlan]:
    """The evaluator's ``Calibration``, its memory plan, and its ``Spares`` made by
    ``spares(arena size, in advance)`` as soon as the plan is known (the first spare, where the
    plan allows one in advance, prepares while the calibration runs, and is ready before the
    calibration times anything)."""
    task, settings = setup.task, setup.settings
    if start.artifact is None:
        raise StartingKernelFailed(start.result.as_evaluation())
    extra = _extra_shapes(setup, references)
    memory = plan(setup, references, extra)
    release_device_memory(settings.device)  # the plan drew every problem once
    kept_at = calibration_path(task, setup.language.name, setup.start_candidate.id, settings)
    kept = read_calibration(kept_at)
    beside = kept is not None or memory.spare_beside_calibration
    made = spares(memory.arena_bytes, memory.spare_in_advance and beside)
    if kept is None:
        # one evaluator of this machine measures; the others that need the same figures wait
        # for it and read them
        with measured_once(kept_at):
            kept = read_calibration(kept_at)
            if kept is None:
                calibration, made = _measure(setup, start, references, made, extra)
                keep_calibration(kept_at, calibration)
                if memory.spare_in_advance and not beside:  # the calibration runner is gone
                    made.start_in_advance()
                return calibration, made, memory
    if memory.spare_in_advance and not beside:
        made.start_in_advance()
    return replace(kept, cached=True), made, memory


def _measure(setup: EvaluatorSetup, start: Build, references: References, made: Spares,
             extra: ExtraChecks) -> tuple[Calibration, Spares]:
    """The calibration runner's figures (see the module's docstring); its arena is the size of
    every spare's (``made.arena_bytes``)."""
    task, settings = setup.task, setup.settings
    runner = CalibrationRunner(evaluation_arena(made.arena_bytes, settings.device),
                               prepare_message(setup, start), settings.memory_limit_mb)
    loaded = False  # from then on, a crash or a fault is the starting kernel's
    try:
        ready = runner.start_up(setup.startup_s(), setup.start_candidate, setup.run_deadline())
        # trusted: its limit is generous (the start-up's and a candidate's run phase together)
        trial = Trial(runner, setup.startup_s() + setup.run_deadline().seconds, trusted=True)
        machine, baselines = acquire_baselines(trial, task, settings, setup.language.name)
        loaded = True
        load_start(trial, prepare_message(setup, start))
        checker = Checker(trial, runner.arena, references, task)
        kept = _check_start(setup, checker, extra)
        timer = ShapeTimer(trial, runner.arena, references, task, settings)
        made.settle()
        clean = {}
        for shape in task.tuning_shapes:
            timed = timer.time(shape, None)
            clean[shape.label] = CleanFigures.of(timed)
    except CandidateFault as fault:
        made.close()
        if loaded:
            raise fault_after_loading(setup.start_candidate, fault) from None
        raise SandboxError(f"calibrating with the starting kernel failed: {fault.message}") \
            from None
    except Stopped as stop:
        made.close()
        if loaded:
            raise stop_after_loading(setup.start_candidate, stop) from None
        raise SandboxError(f"the calibration runner stopped {stop.where}; its log ends "
                           f"with:\n{stop.outcome.log_tail}") from None
    except BaseException:
        made.close()
        raise
    finally:
        runner.close()
    flush_bytes = ready.get("flush_bytes", 0)
    return Calibration(machine, baselines, clean, tuple(kept), extra.dropped,
                       flush_bytes if isinstance(flush_bytes, int) else 0), made


def _check_start(setup: EvaluatorSetup, checker: Checker, extra: ExtraChecks
                 ) -> list[dict[str, Any]]:
    """The starting kernel on every tuning shape (``StartingKernelFailed`` if it fails), then
    the extra checks it passes (those it fails join ``extra.dropped``)."""
    for shape in setup.task.tuning_shapes:
        try:
            checker.check_once(START, shape, 0, f"on shape {shape.label}")
        except CandidateFault as fault:
            raise start_failed(setup.start_candidate, fault.status, fault.message,
                               fault.shapes) from None
    kept = []
    for check, label in extra.usable:
        try:
            checker.check_once(START, check["shape"], 0, f"on extra check {label}",
                               check["scale"])
        except CandidateFault as fault:
            extra.dropped[label] = f"the starting kernel fails it: {fault.message}"
        else:
            kept.append(check)
    return kept
