"""A task's own kernels on a CUDA GPU: the starting kernel (and others asked for, e.g. a
search's best), each checked against the reference and timed alone, with the roofline.

Used by the baselines and search_gpu benchmarks (benchmarks/), next to the baselines
a user would pick (eager, ``torch.compile`` per shape, library kernels), which
evaluators/baselines/baselines.py measures in their own process. It runs in the calling process, which
must see a GPU; the kernels run here too, so use it only on trusted kernels.

Each shape gets copies of its problem made with the sandbox's timing seeds (enough that every
call reads cold inputs), and each kernel is timed alone by the sandbox's GPU timer
(evaluators/measure/gpu_timing.py: CUDA events, the L2 flushed by a pass over a buffer twice its size
before each sample, warm-up, the median of repeats; a CUDA graph of many calls for calls under
``cuda_graph_below_us``). Kernels are built into the evaluator's compile cache and loaded and
launched as the sandbox does, and their outputs checked against the reference first.
"""

from __future__ import annotations

import math
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...search import Candidate, Shape, Task, load_task
from ..correctness import FIRST_POISON, clones, compare, poison
from ..languages import get_language
from ..languages.compile_cache import CompileCache
from ..measure.gpu_timing import TIMING_SEED, CopyPlan, GraphCaptureError, measure_gpu, plan_copies
from ..measure.machine import MachineFigures, device_cache_bytes, measure_gpu_machine
from ..measure.timing import CacheFlusher, TimingPlan
from ..settings import EvaluatorSettings

# A function slower than this (one call, seconds) is measured with one warm-up sample and three
# rounds: a naive kernel on the largest shapes takes most of a second a call.
SLOW_CALL_S = 0.02


@dataclass(frozen=True)
class Timed:
    """One function's time on one shape, in microseconds; ``error`` says why there is none."""

    median_us: float = float("nan")
    iqr_us: float = float("nan")
    samples: int = 0
    mode: str = ""  # "graph" or "events" (evaluators/measure/gpu_timing.py)
    error: str = ""


@dataclass(frozen=True)
class ShapeBaseline:
    """One tuning shape: its roofline, the starting kernel's time and check, other kernels'."""

    shape: str
    dtype: str
    roofline_us: float
    start: Timed
    start_check: str  # "ok", or the first mismatch against the reference
    kernels: dict[str, Timed] = field(default_factory=dict)  # other kernels asked for, by name
    kernel_checks: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TaskBaseline:
    """Every tuning shape of one task on the ``cuda`` device."""

    task: str
    entry: str
    knobs: dict[str, Any]
    build_s: float
    shapes: list[ShapeBaseline] = field(default_factory=list)


def software_versions() -> dict[str, str]:
    """The software the figures were measured with."""
    import torch

    found = {"python": platform.python_version(), "torch": torch.__version__,
             "cuda (torch)": str(torch.version.cuda)}
    try:
        import triton

        found["triton"] = triton.__version__
    except ImportError:
        found["triton"] = "not installed"
    try:
        from ..languages.cuda import nvrtc_identity

        found["nvrtc"] = nvrtc_identity().removeprefix("nvrtc ")
    except RuntimeError as exc:
        found["nvrtc"] = f"unavailable ({exc})"
    return found


def _nbytes(tensors: tuple) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _synchronized_s(call: Callable[[], Any]) -> float:
    import torch

    torch.cuda.synchronize()
    started = time.perf_counter()
    call()
    torch.cuda.synchronize()
    return time.perf_counter() - started


def _error(exc: BaseException) -> str:
    """The exception's type and the first line of its message."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


class BaselineBench:
    """Times the tasks' tuning shapes on one GPU, sharing its flush buffer and machine figures."""

    def __init__(self, settings: EvaluatorSettings) -> None:
        if not settings.device.startswith("cuda"):
            raise ValueError(f"baselines are measured on a CUDA GPU; settings.device is "
                             f"{settings.device!r}")
        self.settings = settings
        self.device = settings.device
        self.l2_bytes = device_cache_bytes(self.device)
        self.machine: MachineFigures = measure_gpu_machine(self.device, self.l2_bytes)
        self.flusher = CacheFlusher(2 * self.l2_bytes, self.device)
        s = settings
        self.plan = TimingPlan(s.warmup, s.min_repeats, s.max_repeats, s.target_rel_se,
                               s.timing_budget_s)
        self.slow_plan = TimingPlan(1, 3, 3, s.target_rel_se, s.timing_budget_s)

    def _load(self, language: Any, candidate: Candidate, what: str) -> Any:
        build = CompileCache(self.settings.cache_dir).build(language, candidate,
                                                            self.settings.compile_timeout_s)
        if build.artifact is None:
            raise RuntimeError(f"{what} does not build:\n{build.result.log}")
        return build, language.load(build.artifact, candidate.entry, candidate.spec_dict)

    def task(self, task_path: Path | str, max_shapes: int | None = None,
             on_shape: Callable[[ShapeBaseline], None] | None = None,
             kernels: dict[str, Candidate] | None = None) -> TaskBaseline:
        """Every tuning shape (or the first ``max_shapes``) of the task at ``task_path``;
        ``kernels`` (candidates by name in any language that runs on the GPU, e.g. a search's
        best) are checked and timed too, each launched by the task's launcher of its language."""
        import torch

        task = load_task(task_path, "cuda")
        language = get_language("cuda", self.settings)
        candidate = task.starting_candidate("cuda")
        build, kernel = self._load(language, candidate, "the starting cuda kernel")
        others = {}
        for name, other in (kernels or {}).items():
            own = language if other.language == "cuda" else get_language(other.language,
                                                                          self.settings)
            others[name] = (own, self._load(own, other, f"kernel {name!r}")[1],
                            getattr(task.module, own.launcher))
        launch = getattr(task.module, language.launcher)
        result = TaskBaseline(task.name, candidate.entry, candidate.knob_values,
                              build.result.seconds)
        try:
            for shape in task.tuning_shapes[:max_shapes]:
                # a dispatch kernel launches each shape with its route (LoadedKernel.fn alone
                # would run every shape with the first route's knobs)
                found = self.shape(task, shape, launch, language.for_shape(kernel, shape),
                                    {name: (own.for_shape(k, shape), own_launch)
                                     for name, (own, k, own_launch) in others.items()})
                result.shapes.append(found)
                if on_shape is not None:
                    on_shape(found)
        finally:
            language.unload(kernel)
            for own, other, _ in others.values():
                own.unload(other)
            torch.cuda.empty_cache()
        return result

    def shape(self, task: Task, shape: Shape, launch: Callable[..., None], fn: Any,
              others: dict[str, tuple[Any, Callable[..., None]]] | None = None
              ) -> ShapeBaseline:
        """One shape: copies of the problem, ``launch(fn, ...)`` (the start) and each of
        ``others`` (by name: the kernel and its language's launcher) checked and timed on them
        (benchmarks/cute_gemm.py passes cuBLAS as the start)."""
        module, params = task.module, dict(shape)
        first = tuple(module.make_inputs(params, TIMING_SEED, self.device))
        first_out = tuple(module.make_outputs(params, self.device))
        copies = plan_copies(_nbytes(first) + _nbytes(first_out), self.l2_bytes)
        inputs = [first] + [tuple(module.make_inputs(params, TIMING_SEED + i, self.device))
                            for i in range(1, copies.copies)]
        outputs = [first_out] + [tuple(module.make_outputs(params, self.device))
                                 for _ in range(1, copies.copies)]

        def start(i: int) -> None:
            launch(fn, inputs[i], outputs[i], params)

        def poison_start(i: int) -> None:  # before each sample, as the sandbox does
            poison(outputs[i], FIRST_POISON)

        check, start_s = self._check_start(task, start, inputs[0], outputs[0])
        moved, flops = task.roofline(shape)
        times, checks = {}, {}
        for name, (other, other_launch) in (others or {}).items():
            def call(i: int, other: Any = other, other_launch: Any = other_launch) -> None:
                other_launch(other, inputs[i], outputs[i], params)

            checks[name], call_s = self._check_start(task, call, inputs[0], outputs[0])
            times[name] = (Timed(error=checks[name]) if math.isnan(call_s)
                           else self._time(call, copies, call_s, poison_start))
        return ShapeBaseline(
            shape=shape.label, dtype=str(shape["dtype"]),
            roofline_us=self.machine.ideal_seconds(moved, flops) * 1e6,
            start=(Timed(error=check) if math.isnan(start_s)
                   else self._time(start, copies, start_s, poison_start)),
            start_check=check, kernels=times,
            kernel_checks=checks)

    def _check_start(self, task: Task, call: Callable[[int], None], inputs: tuple,
                     outputs: tuple) -> tuple[str, float]:
        """The starting kernel's output (copy 0, poisoned first) against the reference, and the
        seconds of a second call (nan when the first raised)."""
        poison(outputs, FIRST_POISON)
        try:
            _synchronized_s(lambda: call(0))
        except Exception as exc:
            return _error(exc), float("nan")
        reference = tuple(task.module.reference(*clones(inputs)))
        mismatch = compare(outputs, reference, task.tolerance).mismatch
        # The call's cost from a second call: the first may compile (a Triton kernel's JIT),
        # and an estimate that counts it would time the kernel with the slow calls' few
        # samples and events, which see the Python launching it.
        return ("ok" if mismatch is None else mismatch.describe()), \
            _synchronized_s(lambda: call(0))

    def _time(self, call: Callable[[int], Any], copies: CopyPlan, estimate_s: float,
              prepare: Callable[[int], None] | None = None) -> Timed:
        """``call`` timed alone by the sandbox's GPU timer (``prepare(copy)`` untimed before each
        sample); a call that cannot be captured in a CUDA graph is timed with events instead."""
        plan = self.slow_plan if estimate_s > SLOW_CALL_S else self.plan
        graph_below_us = self.settings.cuda_graph_below_us
        try:
            try:
                timing = measure_gpu([call], copies, plan, self.flusher, graph_below_us,
                                     [prepare])
            except GraphCaptureError:
                timing = measure_gpu([call], copies, plan, self.flusher, 0.0, [prepare])
        except Exception as exc:
            return Timed(error=_error(exc))
        stats = timing.stats[0]
        return Timed(stats.median_us, stats.iqr_us, stats.samples, timing.mode)
