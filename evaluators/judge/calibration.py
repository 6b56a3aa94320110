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
from dataclasses import asdict, replace
from typing import Any, Protocol

from ...search.candidate import Candidate
from ...search.evaluation import StartingKernelFailed
from ...search.task import Shape, Task
from ..baselines import measured_once
from ..compile_cache import Build
from ..device_arena import evaluation_arena
from ..languages import KernelLanguage
from ..protocol import REFILL_SEED, START, layout
from ..settings import EvaluatorSettings
from .calibration_cache import calibration_path, keep_calibration, read_calibration
from .checks import Checker, arena_bytes
from .deadlines import Deadline
from .figures import Calibration, acquire_baselines
from .memory_plan import MemoryPlan, TimedProblem, device_memory_bytes, plan_memory
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


class SandboxEvaluator(Protocol):
    """What calibration reads of the evaluator (evaluators/judge/evaluator.py)."""

    task: Task
    language: KernelLanguage
    settings: EvaluatorSettings
    start_candidate: Candidate

    def startup_s(self) -> float: ...

    def run_deadline(self) -> Deadline: ...


def prepare_message(evaluator: SandboxEvaluator, start: Build) -> dict[str, Any]:
    """The ``prepare`` request every runner of ``evaluator`` gets when it is spawned."""
    settings = {**asdict(evaluator.settings), "cache_dir": str(evaluator.settings.cache_dir)}
    return {"type": "prepare", "task": str(evaluator.task.path),
            "language": evaluator.language.name, "settings": settings,
            "start": {"artifact": str(start.artifact), "entry": evaluator.start_candidate.entry,
                      "spec": evaluator.start_candidate.spec_dict}}


def _extra_shapes(evaluator: SandboxEvaluator, references: References
                  ) -> tuple[list[tuple[dict[str, Any], str]], dict[str, str]]:
    """The extra checks the task can set up (with their labels), and why the others cannot."""
    usable, dropped = [], {}
    for check in evaluator.settings.extra_checks:
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
    return usable, dropped


def plan(evaluator: SandboxEvaluator, references: References,
         extra: list[tuple[dict[str, Any], str]]) -> MemoryPlan:
    """The arena's size and the memory plan, from the problems' sizes (each drawn once); the
    references' budget follows the plan. ``MemoryPlanError`` where it cannot fit."""
    task, settings = evaluator.task, evaluator.settings
    seeds = [*range(settings.seeds), REFILL_SEED]
    shapes = [*task.tuning_shapes, *task.heldout_shapes, *(c["shape"] for c, _ in extra)]
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
    made = plan_memory(device_memory_bytes(settings.device), [p for _, p in timed], checked,
                       size, l2, references.budget_bytes)
    references.set_budget(made.references_budget)
    return made


def calibrate(evaluator: SandboxEvaluator, start: Build, references: References,
              spares: Callable[[int, bool], Spares]) -> tuple[Calibration, Spares, MemoryPlan]:
    """The evaluator's ``Calibration``, its memory plan, and its ``Spares`` made by
    ``spares(arena size, in advance)`` as soon as the plan is known (the first spare, where the
    plan allows one in advance, prepares while the calibration runs, and is ready before the
    calibration times anything)."""
    task, settings = evaluator.task, evaluator.settings
    if start.artifact is None:
        raise StartingKernelFailed(start.result.as_evaluation())
    extra, dropped = _extra_shapes(evaluator, references)
    memory = plan(evaluator, references, extra)
    release_device_memory(settings.device)  # the plan drew every problem once
    size = memory.arena_bytes
    kept_at = calibration_path(task, evaluator.language.name, evaluator.start_candidate.id,
                               settings)
    kept = read_calibration(kept_at)
    beside = kept is not None or memory.spare_beside_calibration
    made = spares(size, memory.spare_in_advance and beside)
    if kept is None:
        # one evaluator of this machine measures; the others that need the same figures wait
        # for it and read them
        with measured_once(kept_at):
            kept = read_calibration(kept_at)
            if kept is None:
                calibration, made = _measure(evaluator, start, references, made, size, extra,
                                             dropped)
                keep_calibration(kept_at, calibration)
                if memory.spare_in_advance and not beside:  # the calibration runner is gone
                    made.start_in_advance()
                return calibration, made, memory
    if memory.spare_in_advance and not beside:
        made.start_in_advance()
    return replace(kept, cached=True), made, memory


def _measure(evaluator: SandboxEvaluator, start: Build, references: References, made: Spares,
             size: int, extra: list[tuple[dict[str, Any], str]], dropped: dict[str, str]
             ) -> tuple[Calibration, Spares]:
    """The calibration runner's figures (see the module's docstring)."""
    task, settings = evaluator.task, evaluator.settings
    runner = CalibrationRunner(evaluation_arena(size, settings.device),
                               prepare_message(evaluator, start), settings.memory_limit_mb)
    loaded = False  # from then on, a crash or a fault is the starting kernel's
    try:
        ready = runner.start_up(evaluator.startup_s(), evaluator.start_candidate,
                                evaluator.run_deadline())
        # trusted: its limit is generous (the start-up's and a candidate's run phase together)
        trial = Trial(runner, evaluator.startup_s() + evaluator.run_deadline().seconds,
                      trusted=True)
        machine, baselines = acquire_baselines(trial, task, settings,
                                               evaluator.language.name)
        target = {**prepare_message(evaluator, start)["start"],
                  "artifact": runner.stage(start.artifact)}
        loaded = True
        trial.call_problem(trial.ask({"type": "load", **target}, "loaded"), "loading", "")
        checker = Checker(trial, runner.arena, references, task)
        kept = _check_start(evaluator, checker, extra, dropped)
        timer = ShapeTimer(trial, runner.arena, references, task, settings)
        made.settle()
        clean = {}
        for shape in task.tuning_shapes:
            timed = timer.time(shape, None)
            clean[shape.label] = CleanFigures(timed.start.median_us, timed.burst_us,
                                              timed.null_burst_s)
    except CandidateFault as fault:
        made.close()
        if loaded:
            raise fault_after_loading(evaluator.start_candidate, fault) from None
        raise SandboxError(f"calibrating with the starting kernel failed: {fault.message}") \
            from None
    except Stopped as stop:
        made.close()
        if loaded:
            raise stop_after_loading(evaluator.start_candidate, stop) from None
        raise SandboxError(f"the calibration runner stopped {stop.where}; its log ends "
                           f"with:\n{stop.outcome.log_tail}") from None
    except BaseException:
        made.close()
        raise
    finally:
        runner.close()
    flush_bytes = ready.get("flush_bytes", 0)
    return Calibration(machine, baselines, clean, tuple(kept), dropped,
                       flush_bytes if isinstance(flush_bytes, int) else 0), made


def _check_start(evaluator: SandboxEvaluator, checker: Checker,
                 extra: list[tuple[dict[str, Any], str]], dropped: dict[str, str]
                 ) -> list[dict[str, Any]]:
    """The starting kernel on every tuning shape (``StartingKernelFailed`` if it fails), then
    the extra checks it passes."""
    for shape in evaluator.task.tuning_shapes:
        try:
            checker.check_once(START, shape, 0, f"on shape {shape.label}")
        except CandidateFault as fault:
            raise start_failed(evaluator.start_candidate, fault.status, fault.message,
                               fault.shapes) from None
    kept = []
    for check, label in extra:
        try:
            checker.check_once(START, check["shape"], 0, f"on extra check {label}",
                               check["scale"])
        except CandidateFault as fault:
            dropped[label] = f"the starting kernel fails it: {fault.message}"
        else:
            kept.append(check)
    return kept
