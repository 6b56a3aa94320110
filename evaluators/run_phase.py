"""The run phase of one candidate, inside the sandbox: correctness, held-out shapes, timing.

Runs only in the sandbox worker. A candidate fault unwinds as ``CandidateFault`` carrying its
status; any other exception is a fault of the task or the evaluator and is reported as such.
Times are reported raw (candidate, starting kernel); the evaluator derives speedups and the
roofline from them with figures it holds itself. On a CUDA device, timing and profiling are
those of evaluators/gpu_phase.py; a CUDA error is classified (evaluators/cuda_errors.py), and a
sticky one marks the fault ``sticky`` so that the process is replaced without a health check.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..search.evaluation import ShapeResult, Status
from ..search.task import Shape, Task, TaskError
from .correctness import (
    FIRST_POISON,
    SECOND_POISON,
    Comparison,
    clones,
    compare,
    first_bit_difference,
    poison,
    refill,
    structure_problem,
)
from .cuda_errors import classify
from .integrity import IntegrityViolation, ProcessSnapshot, guarded_call
from .languages.base import KernelLanguage, LoadedKernel
from .sandbox import HEALTH_CHECK
from .settings import EvaluatorSettings
from .timing import CacheFlusher, TimingPlan, TimingStats, measure

# The seed of the values refilled into a checked call's input buffers: never a checked seed.
REFILL_SEED = 7919


class CandidateFault(Exception):
    """A verdict against the candidate, raised where it is found."""

    def __init__(self, status: Status, message: str, shapes: Sequence[ShapeResult] = (),
                 sticky: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.shapes = tuple(shapes)
        self.sticky = sticky  # a CUDA error that leaves the process unusable


Progress = Callable[[str, Shape], None]


@dataclass
class SandboxContext:
    """What the sandbox keeps between candidates: the task, the baseline kernel, the flusher."""

    task: Task
    language: KernelLanguage
    settings: EvaluatorSettings
    start: LoadedKernel
    flusher: CacheFlusher | None
    progress: Progress
    eager: dict[str, TimingStats] = field(default_factory=dict)
    cache_bytes: int = 0  # the cache a flush evicts (CPU last level, GPU L2)
    snapshot: ProcessSnapshot | None = None  # taken once the starting kernel passed
    checks: list[dict[str, Any]] = field(default_factory=list)  # extra checks the start passes
    dropped_checks: dict[str, str] = field(default_factory=dict)  # label -> why

    @property
    def device(self) -> str:
        return self.settings.device

    @property
    def on_gpu(self) -> bool:
        return self.device.startswith("cuda")

    @staticmethod
    def is_cuda_failure(exc: BaseException) -> bool:
        return classify(exc) is not None

    def fault(self, exc: BaseException, shape: Shape, what: str = "") -> CandidateFault:
        """The verdict for an exception raised by the candidate's call on ``shape``."""
        where = f"on shape {shape.label}" + (f" ({what})" if what else "")
        failure = classify(exc)
        if failure is not None:
            return CandidateFault(Status.RUNTIME_ERROR, failure.describe(where),
                                  [ShapeResult(shape=shape.label)], sticky=failure.sticky)
        return CandidateFault(Status.RUNTIME_ERROR,
                              f"calling the kernel raised {type(exc).__name__}: {exc} {where}")

    @property
    def plan(self) -> TimingPlan:
        s = self.settings
        return TimingPlan(s.warmup, s.min_repeats, s.max_repeats, s.target_rel_se,
                          s.timing_budget_s)

    def call(self, kernel: LoadedKernel, inputs: tuple, outputs: tuple, shape: Shape) -> None:
        """One launch through the task's launcher, under the integrity checks
        (evaluators/integrity.py); an exception or a violation is the candidate's fault."""
        launch = getattr(self.task.module, self.language.launcher)

        def once() -> None:
            launch(kernel.fn, inputs, outputs, dict(shape))
            self.language.synchronize()

        try:
            problem = guarded_call(once, inputs, outputs, host_code=self.language.host_code,
                                   source_file=self.language.source_file(kernel))
        except IntegrityViolation as exc:
            problem = str(exc)
        except Exception as exc:
            raise self.fault(exc, shape) from None
        if problem:
            raise CandidateFault(Status.REJECTED, f"on shape {shape.label}, the kernel {problem}",
                                 [ShapeResult(shape=shape.label)])

    def measure_eager(self) -> None:
        """Time the PyTorch reference on every tuning shape (once per sandbox)."""
        for shape in self.task.tuning_shapes:
            if self.on_gpu:
                from .gpu_phase import measure_eager_gpu

                self.eager[shape.label] = measure_eager_gpu(self, shape)
                continue
            inputs = tuple(self.task.module.make_inputs(dict(shape), 0, self.device))
            (stats,) = measure([functools.partial(self.task.module.reference, *inputs)],
                               self.plan, self.flusher, self.language.synchronize)
            self.eager[shape.label] = stats


@dataclass
class _ShapeErrors:
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0

    def add(self, comparison: Comparison) -> None:
        self.max_abs_err = max(self.max_abs_err, comparison.max_abs_err)
        self.max_rel_err = max(self.max_rel_err, comparison.max_rel_err)


def _pristine_and_reference(inputs: tuple, task: Task) -> tuple[tuple, tuple]:
    """An untouched copy of ``inputs``, and the reference outputs computed on another copy."""
    return clones(inputs), tuple(task.module.reference(*clones(inputs)))


def _check_inputs(pristine: tuple, inputs: tuple, shape: Shape, where: str) -> None:
    changed = first_bit_difference(pristine, inputs)
    if changed is not None:
        raise CandidateFault(Status.REJECTED,
                             f"the kernel modified its {changed.where('input')} {where}: "
                             f"inputs are read-only (write only into the outputs)",
                             [ShapeResult(shape=shape.label)])


def scaled(inputs: tuple, scale: float) -> tuple:
    """``inputs`` with every floating tensor multiplied by ``scale`` (in place; 1.0: unchanged)."""
    if scale != 1.0:
        for tensor in inputs:
            if getattr(tensor, "is_floating_point", lambda: False)():
                tensor.mul_(scale)
    return inputs


def check_once(ctx: SandboxContext, kernel: LoadedKernel, shape: Shape, seed: int,
               where: str, scale: float = 1.0) -> Comparison:
    """Two calls on one problem: compared with the reference, then with each other, bit for bit."""
    task = ctx.task
    inputs = scaled(tuple(task.module.make_inputs(dict(shape), seed, ctx.device)), scale)
    pristine, reference = _pristine_and_reference(inputs, task)
    outputs = tuple(task.module.make_outputs(dict(shape), ctx.device))
    problem = structure_problem(outputs, reference)
    if problem:
        raise CandidateFault(Status.INCORRECT, f"{where}, seed {seed}: {problem}",
                             [ShapeResult(shape=shape.label)])
    poison(outputs, FIRST_POISON)
    ctx.call(kernel, inputs, outputs, shape)
    _check_inputs(pristine, inputs, shape, f"{where}, seed {seed}")
    comparison = compare(outputs, reference, task.tolerance)
    if comparison.mismatch is not None:
        raise CandidateFault(
            Status.INCORRECT,
            f"wrong result {where}, seed {seed}: {comparison.mismatch.describe()}; max abs err "
            f"{comparison.max_abs_err:.3g}, max rel err {comparison.max_rel_err:.3g}",
            [ShapeResult(shape=shape.label, max_abs_err=comparison.max_abs_err,
                         max_rel_err=comparison.max_rel_err)])
    first = clones(outputs)
    poison(outputs, SECOND_POISON)
    ctx.call(kernel, inputs, outputs, shape)
    _check_inputs(pristine, inputs, shape, f"{where}, seed {seed} (second call)")
    differs = first_bit_difference(first, outputs)
    if differs is not None:
        raise CandidateFault(
            Status.INCORRECT,
            f"non-deterministic {where}, seed {seed}: two calls on the same inputs differ at "
            f"{differs.where('output')} (outputs are poisoned differently before each call, so "
            f"an element written only sometimes shows here too)",
            [ShapeResult(shape=shape.label)])
    _check_refilled(ctx, kernel, inputs, outputs, shape, f"{where}, seed {seed}", scale)
    check_process(ctx, shape, where)
    return comparison


def _check_refilled(ctx: SandboxContext, kernel: LoadedKernel, inputs: tuple, outputs: tuple,
                    shape: Shape, where: str, scale: float = 1.0) -> None:
    """A third call on the same buffers refilled with new values must give the new answer: a
    kernel that caches results between calls (keyed by pointer, shape or a sample) fails here."""
    fresh = scaled(tuple(ctx.task.module.make_inputs(dict(shape), REFILL_SEED, ctx.device)),
                   scale)
    if not refill(inputs, fresh):
        return  # the task draws the same values for every seed: nothing to tell apart
    pristine, reference = _pristine_and_reference(inputs, ctx.task)
    poison(outputs, FIRST_POISON)
    ctx.call(kernel, inputs, outputs, shape)
    _check_inputs(pristine, inputs, shape, f"{where} (refilled inputs)")
    comparison = compare(outputs, reference, ctx.task.tolerance)
    if comparison.mismatch is not None:
        raise CandidateFault(
            Status.INCORRECT,
            f"stale result {where}: after the same input buffers were refilled with new values, "
            f"the kernel's output is wrong ({comparison.mismatch.describe()}) — a kernel may not "
            f"cache results between calls (by pointer, shape or sampled values)",
            [ShapeResult(shape=shape.label)])


def check_process(ctx: SandboxContext, shape: Shape, where: str) -> None:
    """REJECTED when a function the judge relies on was replaced (taken against the snapshot)."""
    problem = ctx.snapshot.changed() if ctx.snapshot is not None else None
    if problem:
        raise CandidateFault(Status.REJECTED, f"{where}, the kernel {problem}",
                             [ShapeResult(shape=shape.label)])


def _check_shapes(ctx: SandboxContext, kernel: LoadedKernel, shapes: Sequence[Shape],
                  phase: str, label: str, done: list[ShapeResult],
                  scales: Sequence[float] = ()) -> dict[str, _ShapeErrors]:
    errors: dict[str, _ShapeErrors] = {}
    for index, shape in enumerate(shapes):
        scale = scales[index] if scales else 1.0
        where = f"on {label} {shape.label}" + (f" with inputs scaled by {scale:g}"
                                                if scale != 1.0 else "")
        ctx.progress(phase, shape)
        errors[shape.label] = _ShapeErrors()
        for seed in range(ctx.settings.seeds):
            try:
                errors[shape.label].add(check_once(ctx, kernel, shape, seed, where, scale))
            except CandidateFault as fault:
                fault.shapes = (*done, *fault.shapes)
                raise
        done.append(ShapeResult(shape=shape.label, correct=True, **asdict(errors[shape.label])))
    return errors


def _time_shape(ctx: SandboxContext, kernel: LoadedKernel, shape: Shape,
                errors: _ShapeErrors) -> tuple[ShapeResult, float]:
    """Candidate and starting kernel timed interleaved on one problem; then a re-check."""
    inputs = tuple(ctx.task.module.make_inputs(dict(shape), 0, ctx.device))
    pristine, reference = _pristine_and_reference(inputs, ctx.task)
    ours = tuple(ctx.task.module.make_outputs(dict(shape), ctx.device))
    theirs = tuple(ctx.task.module.make_outputs(dict(shape), ctx.device))

    def candidate() -> None:
        ctx.call(kernel, inputs, ours, shape)

    def baseline() -> None:
        ctx.call(ctx.start, inputs, theirs, shape)

    # Both outputs are poisoned before their call: the same stores, so neither kernel finds
    # its output lines freshly written (cache-hot) when the other does not.
    prepare = [lambda: poison(ours, FIRST_POISON), lambda: poison(theirs, FIRST_POISON)]
    mine, start = measure([candidate, baseline], ctx.plan, ctx.flusher, ctx.language.synchronize,
                          prepare=prepare)
    where = f"on shape {shape.label} after timing"
    _check_inputs(pristine, inputs, shape, where)
    recheck = compare(ours, reference, ctx.task.tolerance)
    if recheck.mismatch is not None:
        raise CandidateFault(Status.INCORRECT,
                             f"wrong result of the last timed call {where} (the kernel changes "
                             f"its behaviour across calls?): {recheck.mismatch.describe()}",
                             [ShapeResult(shape=shape.label)])
    errors.add(recheck)
    result = ShapeResult(shape=shape.label, correct=True, time_us=mine.median_us,
                         time_spread_us=mine.iqr_us, samples=mine.samples,
                         start_time_us=start.median_us, **asdict(errors))
    return result, mine.rel_se


def run_candidate(ctx: SandboxContext, kernel: LoadedKernel,
                  request: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The whole run phase; returns the result message (raises ``CandidateFault`` on a verdict).

    ``request`` is the evaluate request (artifact, entry, spec), needed only by Nsight Compute.
    """
    task = ctx.task
    checked: list[ShapeResult] = []
    errors = _check_shapes(ctx, kernel, task.tuning_shapes, "correctness", "shape", checked)
    if ctx.settings.check_heldout and task.heldout_shapes:
        try:
            _check_shapes(ctx, kernel, task.heldout_shapes, "held-out", "held-out shape", [])
        except CandidateFault as fault:
            fault.message += (" — held-out shapes are never tuned on; a kernel that is right "
                              "only on the tuning shapes is specialised to them")
            fault.shapes = (*checked, *fault.shapes)
            raise
    _check_extra(ctx, kernel, checked)
    results, rel_se, details = [], {}, {}
    for shape in task.tuning_shapes:
        ctx.progress("timing", shape)
        if ctx.on_gpu:
            from .gpu_phase import time_shape_gpu

            result, rel_se[shape.label], details[shape.label] = time_shape_gpu(
                ctx, kernel, shape, errors[shape.label])
        else:
            result, rel_se[shape.label] = _time_shape(ctx, kernel, shape, errors[shape.label])
        results.append(result)
    check_process(ctx, task.tuning_shapes[-1], "after timing")
    heldout = len(task.heldout_shapes) if ctx.settings.check_heldout else 0
    extra = len(ctx.checks)
    metrics: dict[str, Any] = {"timing_rel_se": rel_se}
    resources = ctx.language.resources(kernel)
    if ctx.on_gpu:
        metrics.update(_gpu_profiles(ctx, kernel, request, resources, details))
    return {"type": "result", "status": Status.OK.value,
            "message": f"correct on {len(results)} tuning shapes x {ctx.settings.seeds} seeds, "
                       f"{heldout} held-out shapes and {extra} extra checks",
            "shapes": [asdict(r) for r in results], "resources": resources,
            "metrics": metrics}


def _check_extra(ctx: SandboxContext, kernel: LoadedKernel, checked: list[ShapeResult]) -> None:
    """The tester's checks (``EvaluatorSettings.extra_checks``), after the task's own shapes."""
    checks = ctx.checks
    if not checks:
        return
    shapes = [Shape.of(check["shape"]) for check in checks]
    try:
        _check_shapes(ctx, kernel, shapes, "extra", "extra check", [],
                      [check["scale"] for check in checks])
    except CandidateFault as fault:
        fault.shapes = (*checked, *fault.shapes)
        raise


def _gpu_profiles(ctx: SandboxContext, kernel: LoadedKernel, request: Mapping[str, Any] | None,
                  resources: dict[str, Any], details: dict[str, Any]) -> dict[str, Any]:
    """Per-shape timing details, then (untimed) torch.profiler and Nsight Compute results."""
    from .gpu_phase import ncu_candidate, profile_candidate

    metrics: dict[str, Any] = {"timing": details}
    if ctx.settings.profile_kernels:
        ctx.progress("profiling", ctx.task.tuning_shapes[0])
        metrics["profile"] = profile_candidate(ctx, kernel)
    if ctx.settings.ncu and request is not None:
        ctx.progress("profiling", ctx.task.tuning_shapes[0])
        metrics["ncu"] = ncu_candidate(ctx, dict(request), resources)
    return metrics


def fault_message(fault: CandidateFault) -> dict[str, Any]:
    return {"type": "result", "status": fault.status.value, "message": fault.message,
            "shapes": [asdict(s) for s in fault.shapes], "metrics": {}}


def sandbox_is_healthy(ctx: SandboxContext) -> bool:
    """Whether the starting kernel still passes on the first tuning shape.

    Run after every candidate: native code that returned normally may still have written over
    memory that is not its own, and the next candidate must not be judged in such a process.
    """
    shape = ctx.task.tuning_shapes[0]
    ctx.progress(HEALTH_CHECK, shape)
    try:
        check_once(ctx, ctx.start, shape, 0, f"on shape {shape.label}")
    except Exception:  # a verdict, or a CUDA context the candidate left broken
        return False
    return True


def check_baseline(ctx: SandboxContext) -> None:
    """The starting kernel must pass its own task; otherwise no speedup against it means much."""
    for shape in ctx.task.tuning_shapes:
        try:
            check_once(ctx, ctx.start, shape, 0, f"on shape {shape.label}")
        except CandidateFault as fault:
            raise TaskError(f"task {ctx.task.name!r}: its starting "
                               f"{ctx.language.name} kernel fails its own checks: "
                               f"{fault.message}") from None
    _validate_extra_checks(ctx)
    ctx.snapshot = ProcessSnapshot([ctx.task.module])


def _validate_extra_checks(ctx: SandboxContext) -> None:
    """Keep the extra checks the starting kernel passes; a check it fails (or that the task
    cannot even set up, a size its contract does not allow) would fail every candidate."""
    for check in ctx.settings.extra_checks:
        shape = Shape.of(check["shape"])
        label = shape.label + (f",scale={check['scale']:g}" if check["scale"] != 1.0 else "")
        try:
            check_once(ctx, ctx.start, shape, 0, f"on extra check {label}", check["scale"])
        except CandidateFault as fault:
            ctx.dropped_checks[label] = f"the starting kernel fails it: {fault.message}"
        except Exception as exc:  # the task's own code refused the shape
            if ctx.is_cuda_failure(exc):
                raise
            ctx.dropped_checks[label] = (f"the task cannot run it: {type(exc).__name__}: "
                                         f"{exc}")[:500]
        else:
            ctx.checks.append(check)
