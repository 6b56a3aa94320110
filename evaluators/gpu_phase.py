"""The GPU parts of the run phase: timing a shape, timing the reference, profiling a candidate.

Called by evaluators/run_phase.py when the sandbox's device is a CUDA GPU. Each timed shape gets
several copies of its problem (``gpu_timing.plan_copies``: enough that every call reads cold
inputs), made with distinct seeds from ``TIMING_SEED`` on, so no call sees the data the previous
one used. After timing, the last output the candidate wrote is checked against the reference of
the inputs it read, and those inputs against a fresh copy made with the same seed (``make_inputs``
is deterministic per seed and device).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from ..search.evaluation import ShapeResult, Status
from ..search.task import Shape
from .correctness import FIRST_POISON, clones, compare, first_bit_difference, poison
from .gpu_state import gpu_state
from .gpu_timing import CopyPlan, GpuTiming, measure_gpu, plan_copies
from .integrity import IntegrityViolation, guarded_call
from .profiling import kernel_profile, ncu_profile

if TYPE_CHECKING:
    from .languages.base import LoadedKernel
    from .run_phase import SandboxContext, _ShapeErrors

TIMING_SEED = 1000


def _nbytes(tensors: tuple) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _copies(ctx: SandboxContext, shape: Shape, outputs_per_copy: int
            ) -> tuple[CopyPlan, list[tuple], list[list[tuple]]]:
    """The copy plan, the input copies and ``outputs_per_copy`` output sets per copy."""
    module, params = ctx.task.module, dict(shape)
    first = tuple(module.make_inputs(params, TIMING_SEED, ctx.device))
    outputs = tuple(module.make_outputs(params, ctx.device))
    plan = plan_copies(_nbytes(first) + _nbytes(outputs), ctx.cache_bytes)
    inputs = [first] + [tuple(module.make_inputs(params, TIMING_SEED + i, ctx.device))
                        for i in range(1, plan.copies)]
    sets = [[outputs if (i, j) == (0, 0) else tuple(module.make_outputs(params, ctx.device))
             for i in range(plan.copies)] for j in range(outputs_per_copy)]
    return plan, inputs, sets


def _timed(ctx: SandboxContext, shape: Shape, measure: Any) -> GpuTiming:
    """Run ``measure``; a failure inside becomes the candidate's ``CandidateFault``."""
    from .run_phase import CandidateFault

    try:
        return measure()
    except CandidateFault:
        raise
    except Exception as exc:
        raise ctx.fault(exc, shape, "while timing") from None


def _guarded_launch(ctx: SandboxContext, kernel: LoadedKernel, inputs: tuple, outputs: tuple,
                    shape: Shape) -> None:
    """One timed launch under the same integrity checks as the correctness calls, so that a
    launcher cannot switch to PyTorch compute (or swap its outputs) once it is being timed.

    In graph mode the checks run while the calls are captured, on the host, and replays do not
    repeat them; in events mode (calls of ``cuda_graph_below_us`` or more) their host time is
    inside both functions' samples alike. A violation inside a capture makes the capture fail,
    events mode then repeats the call, and the violation becomes the verdict.
    """
    from .run_phase import CandidateFault

    launch = getattr(ctx.task.module, ctx.language.launcher)
    try:
        problem = guarded_call(lambda: launch(kernel.fn, inputs, outputs, dict(shape)), inputs,
                               outputs, host_code=ctx.language.host_code,
                               source_file=ctx.language.source_file(kernel))
    except IntegrityViolation as exc:
        problem = str(exc)
    if problem:
        raise CandidateFault(Status.REJECTED, f"on shape {shape.label} while being timed, the "
                             f"kernel {problem}", [ShapeResult(shape=shape.label)])


def time_shape_gpu(ctx: SandboxContext, kernel: LoadedKernel, shape: Shape,
                   errors: _ShapeErrors) -> tuple[ShapeResult, float, dict[str, Any]]:
    """Candidate and starting kernel timed interleaved on one shape; then the re-check."""
    from .run_phase import CandidateFault

    plan, inputs, (ours, theirs) = _copies(ctx, shape, 2)
    params = dict(shape)

    def candidate(i: int) -> None:
        _guarded_launch(ctx, kernel, inputs[i], ours[i], shape)

    def baseline(i: int) -> None:  # guarded too, so both carry the same host overhead
        _guarded_launch(ctx, ctx.start, inputs[i], theirs[i], shape)

    prepare = [lambda i: poison(ours[i], FIRST_POISON), lambda i: poison(theirs[i], FIRST_POISON)]
    timing = _timed(ctx, shape, lambda: measure_gpu(
        [candidate, baseline], plan, ctx.plan, ctx.flusher, ctx.settings.cuda_graph_below_us,
        prepare))
    last = timing.last_copy[0]
    where = f"on shape {shape.label} after timing"
    pristine = tuple(ctx.task.module.make_inputs(params, TIMING_SEED + last, ctx.device))
    changed = first_bit_difference(pristine, inputs[last])
    if changed is not None:
        raise CandidateFault(Status.REJECTED,
                             f"the kernel modified its {changed.where('input')} {where}: inputs "
                             f"are read-only (write only into the outputs)",
                             [ShapeResult(shape=shape.label)])
    reference = tuple(ctx.task.module.reference(*clones(pristine)))
    recheck = compare(ours[last], reference, ctx.task.tolerance)
    if recheck.mismatch is not None:
        raise CandidateFault(Status.INCORRECT,
                             f"wrong result of the last timed call {where} (the kernel changes "
                             f"its behaviour across calls?): {recheck.mismatch.describe()}",
                             [ShapeResult(shape=shape.label)])
    errors.add(recheck)
    mine, start = timing.stats
    result = ShapeResult(shape=shape.label, correct=True, time_us=mine.median_us,
                         time_spread_us=mine.iqr_us, samples=mine.samples,
                         start_time_us=start.median_us, **asdict(errors))
    detail = {"mode": timing.mode, "calls_per_sample": timing.calls_per_sample,
              "copies": timing.copies, "gpu_state": gpu_state(_index(ctx))}
    return result, mine.rel_se, detail


def measure_eager_gpu(ctx: SandboxContext, shape: Shape) -> Any:
    """The PyTorch reference on one shape, timed like a kernel (graph or events)."""
    plan, inputs, _ = _copies(ctx, shape, 0)
    reference = ctx.task.module.reference
    timing = measure_gpu([lambda i: reference(*inputs[i])], plan, ctx.plan, ctx.flusher,
                         ctx.settings.cuda_graph_below_us)
    return timing.stats[0]


def _index(ctx: SandboxContext) -> int:
    import torch

    device = torch.device(ctx.device)
    return device.index if device.index is not None else torch.cuda.current_device()


def profile_candidate(ctx: SandboxContext, kernel: LoadedKernel) -> dict[str, Any]:
    """Per tuning shape, the kernels one call launches and their device times."""
    launch = getattr(ctx.task.module, ctx.language.launcher)
    profiles = {}
    for shape in ctx.task.tuning_shapes:
        params = dict(shape)
        inputs = tuple(ctx.task.module.make_inputs(params, 0, ctx.device))
        outputs = tuple(ctx.task.module.make_outputs(params, ctx.device))
        launch(kernel.fn, inputs, outputs, params)  # warm: the profiled call is a steady one
        try:
            profiles[shape.label] = kernel_profile(
                lambda i=inputs, o=outputs, p=params: launch(kernel.fn, i, o, p))
        except Exception as exc:
            if ctx.is_cuda_failure(exc):
                raise ctx.fault(exc, shape, "while profiling") from None
            return {"error": f"torch.profiler failed: {type(exc).__name__}: {exc}"}
    return profiles


def ncu_candidate(ctx: SandboxContext, message: dict[str, Any],
                  resources: dict[str, Any]) -> dict[str, Any]:
    """Nsight Compute on the largest tuning shape, in a child process."""
    shape = max(ctx.task.tuning_shapes, key=lambda s: sum(ctx.task.roofline(s)))
    settings = {**asdict(ctx.settings), "cache_dir": str(ctx.settings.cache_dir)}
    target = {"task": str(ctx.task.path), "language": ctx.language.name,
              "artifact": message["artifact"], "entry": message["entry"],
              "spec": message["spec"], "shape": dict(shape), "settings": settings}
    kernels = sorted({launch["kernel"] for launch in resources.get("launches", [])})
    found = ncu_profile(target, kernels, ctx.settings.ncu_timeout_s)
    return {"shape": shape.label, **found}
