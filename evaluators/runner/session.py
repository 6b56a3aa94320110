"""The runner's state: the task, the starting kernel, the candidate, and the call of either.

``Session.prepare`` runs before any candidate code (torch, the task module, the starting kernel,
the cache flusher); ``Session.load`` then enters the OS isolation and loads the candidate. A
call copies the inputs from the shared arena into the session's own tensors (device tensors on
a GPU), poisons the outputs, calls the kernel through the task's launcher under the integrity
guard (evaluators/runner/integrity.py), synchronises, and copies outputs and inputs back.
Everything the session reports is an observation; the judge decides what it means.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from ...search import Shape, load_task
from ..correctness import poison
from ..languages import KernelLanguage, LoadedKernel, get_language
from ..languages.cuda_errors import classify
from ..measure.device_arena import attach_arena
from ..measure.machine import device_cache_bytes
from ..measure.profiling import kernel_profile
from ..measure.shared_memory import spec_dtype
from ..measure.timing import CacheFlusher, TimingPlan
from ..protocol import CANDIDATE, JIT_CACHE, START, WARMING, TensorSpec, release_due
from ..sandbox.isolation import enter_isolation, forbid_processes
from ..settings import EvaluatorSettings
from .integrity import IntegrityViolation, ProcessSnapshot, checked_entry, guarded_call

# Where the judge names the place of an error in a CUDA failure's description.
WHERE = "{where}"
_TEXT_LIMIT = 2000


class CallFailed(Exception):
    """A call of a kernel raised, or did what a kernel may not; ``report`` is the raw reply."""

    def __init__(self, report: dict[str, Any]) -> None:
        super().__init__(str(report.get("message", "")))
        self.report = report


def error_report(exc: BaseException) -> dict[str, Any]:
    """An exception as raw data: its type and text, and what CUDA says about it."""
    failure = classify(exc)
    report: dict[str, Any] = {"error": type(exc).__name__, "message": str(exc)[:_TEXT_LIMIT]}
    if failure is not None:
        report["cuda"] = failure.describe(WHERE)
        report["sticky"] = failure.sticky
    return report


class Session:
    """One runner's task, kernels and buffers."""

    def __init__(self, arena_fd: int) -> None:
        self.arena_fd = arena_fd
        self.arena: Any = None  # attached at prepare: a device arena needs CUDA first
        self.task: Any = None
        self.language: KernelLanguage | None = None
        self.settings = EvaluatorSettings()
        self.kernels: dict[str, LoadedKernel] = {}
        self.flusher: CacheFlusher | None = None
        self.cache_bytes = 0
        self.snapshot: ProcessSnapshot | None = None
        self.isolation: dict[str, Any] | None = None
        self.compile_window = False  # fork/exec still allowed (a JIT compiling at first call)
        self.artifacts: dict[str, dict[str, Any]] = {}
        self._buffers: tuple[tuple[Any, ...], tuple[Any, ...]] | None = None
        self.compiled: Callable[[], dict[str, float]] | None = None  # a JIT's compiles
        self.problem_bytes = 0  # the largest shape's inputs and outputs drawn on the device
        # sends a frame to the judge ahead of the reply (the request loop sets it)
        self.notify: Callable[[dict[str, Any]], None] | None = None

    @property
    def device(self) -> str:
        return self.settings.device

    @property
    def on_gpu(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def plan(self) -> TimingPlan:
        s = self.settings
        return TimingPlan(s.warmup, s.min_repeats, s.max_repeats, s.target_rel_se,
                          s.timing_budget_s)

    # -- before any candidate code ---------------------------------------------------------

    def prepare(self, message: Mapping[str, Any]) -> dict[str, Any]:
        """Load torch's state, the task and the starting kernel (no candidate code yet)."""
        torch.set_num_threads(1)  # kernels run on one thread; so does the code around them
        self.settings = EvaluatorSettings(**message["settings"])
        self.task = load_task(message["task"], self.device.split(":")[0])
        self.language = get_language(message["language"], self.settings)
        os.environ.update(self.language.sandbox_environment())  # e.g. TRITON_INTERPRET=1
        self.kernels[START] = self._load(message["start"])
        self.artifacts[START] = dict(message["start"])
        self.cache_bytes = device_cache_bytes(self.device)
        if self.settings.flush_cache:
            self.flusher = CacheFlusher(2 * self.cache_bytes, self.device)
        if self.on_gpu:
            torch.cuda.init()
        self.arena = attach_arena(self.arena_fd, message.get("arena"), self.device)
        if self.on_gpu:
            self.arena.pin()  # a host arena: DMA copies (the judge pins its side too)
        # One call of the starting kernel per tuning shape now: a JIT compiles it while
        # processes may still start, and what a first call imports lazily (the triton
        # interpreter imports torch._dynamo, which wraps torch.manual_seed) is in place before
        # the snapshot the candidate's calls are checked against. The judge hears when these
        # calls begin: from then on a hang is the starting kernel's, held to the run's limit.
        if self.notify is not None:
            self.notify({"type": WARMING})
        self._warm_start()
        if self.on_gpu and (self.settings.profile_kernels or self.language.host_code):
            self._warm_profiler()
        # a spare waits holding its arena, not its warm-up's draws (where they were large)
        self.release_buffers()
        return {"type": "ready", "cache_bytes": self.cache_bytes,
                "flush_bytes": self.flusher.nbytes if self.flusher else 0}

    def _load(self, target: Mapping[str, Any]) -> LoadedKernel:
        assert self.language is not None
        kernel = self.language.load(Path(target["artifact"]), target["entry"], target["spec"])
        if self.language.host_code:  # a returned (lazy, subclassed) tensor is never a result
            kernel = LoadedKernel(fn=checked_entry(kernel.fn), handle=kernel.handle)
        return kernel

    # -- the candidate ---------------------------------------------------------------------

    @property
    def needs_compiler(self) -> bool:
        """Whether the kernel runs a compiler process at its first call on this device (Triton's
        ptxas on a GPU): ``LanguageSpec.jit_devices``."""
        return (self.language is not None
                and self.language.language_spec.compiles_at_first_call(self.device))

    def _warm_start(self) -> None:
        for shape in self.task.tuning_shapes:
            inputs = tuple(self.task.module.make_inputs(dict(shape), 0, self.device))
            outputs = tuple(self.task.module.make_outputs(dict(shape), self.device))
            self.launch(START, inputs, outputs, shape)
            self.problem_bytes = max(self.problem_bytes, _nbytes((*inputs, *outputs)))
        self.synchronize()

    def _warm_profiler(self) -> None:
        """One profiled call of the starting kernel: the profiler's start-up (CUPTI, a second
        or so in a new process) happens here, in the spare, while the previous candidate is
        judged, rather than in the candidate's own evaluation."""
        shape = self.task.tuning_shapes[0]
        inputs = tuple(self.task.module.make_inputs(dict(shape), 0, self.device))
        outputs = tuple(self.task.module.make_outputs(dict(shape), self.device))
        kernel_profile(lambda: self.launch(START, inputs, outputs, shape))

    def load(self, message: Mapping[str, Any], scratch: Path) -> dict[str, Any]:
        """Enter the OS isolation (evaluators/sandbox/isolation.py), snapshot the process, then load
        the candidate."""
        self.isolation = enter_isolation(scratch, allow_processes=self.needs_compiler)
        self.compile_window = self.isolation.get("isolation_processes", "").startswith("allowed")
        if self.needs_compiler:
            # the candidate's own compile cache, in the one writable place: what was built
            # ahead for it (evaluators/judge/prebuild.py), where the judge staged it
            os.environ["TRITON_CACHE_DIR"] = str(scratch / JIT_CACHE)
        assert self.language is not None
        self.compiled = self.language.watch_compiles()
        self.snapshot = ProcessSnapshot([self.task.module])
        self.kernels[CANDIDATE] = self._load(message)
        self.artifacts[CANDIDATE] = dict(message)
        return {"type": "loaded", "isolation": self.isolation}

    def seal(self) -> dict[str, Any]:
        """Close the compile window (every shape has been called once); report what it left
        running."""
        leftover = forbid_processes() if self.compile_window else []
        self.compile_window = False
        return {"type": "sealed", "leftover": leftover,
                "compiled": self.compiled() if self.compiled is not None else {}}

    def settle(self) -> None:
        """Finish the copies into the arena before a reply (a broken context: nothing to
        finish, and the reply says what broke it)."""
        if self.arena is not None:
            try:
                self.arena.settle()
            except Exception:
                pass

    def tampering(self) -> str | None:
        """A function of torch, the clocks or this runner replaced since the candidate loaded."""
        return self.snapshot.changed() if self.snapshot is not None else None

    def launch(self, which: str, inputs: Sequence[Any], outputs: Sequence[Any],
               shape: Shape) -> None:
        """One guarded call of kernel ``which`` (no synchronisation); ``CallFailed`` on an
        exception or an integrity finding."""
        assert self.language is not None
        kernel = self.kernels[which]
        launcher = getattr(self.task.module, self.language.launcher)
        fn = self.language.for_shape(kernel, shape)
        try:
            problem = guarded_call(lambda: launcher(fn, inputs, outputs, dict(shape)),
                                   inputs, outputs, host_code=self.language.host_code,
                                   source_file=self.language.source_file(kernel))
        except IntegrityViolation as exc:
            problem = str(exc)
        except Exception as exc:
            raise CallFailed(error_report(exc)) from None
        if problem:
            raise CallFailed({"problem": problem[:_TEXT_LIMIT]})

    def release_buffers(self) -> bool:
        """Drop the checks' buffers; on a problem whose largest shape (inputs and outputs)
        takes ``RELEASE_ABOVE_BYTES`` or more, hand the allocator's free blocks back to the
        device too (the judge needs the room there). On a smaller problem the blocks stay
        cached for the next shape: handing them back cost each shape's first copies a round
        of cudaFree and cudaMalloc (on an H200, 0.3-0.5 s a shape). True when handed back."""
        self._buffers = None
        if not self.on_gpu or not release_due(self.problem_bytes):
            return False
        try:
            torch.cuda.empty_cache()
        except Exception:  # a context the kernel broke: the next call says so
            return False
        return True

    def synchronize(self) -> None:
        assert self.language is not None
        try:
            self.language.synchronize()
        except Exception as exc:
            raise CallFailed(error_report(exc)) from None

    # -- one checked call --------------------------------------------------------------------

    def call(self, message: Mapping[str, Any]) -> dict[str, Any]:
        """The ``call`` request: copy inputs in (into the same buffers unless ``fresh``), poison,
        call, synchronise, copy outputs and inputs back to the arena."""
        shape = Shape.of(message["shape"])
        inputs_at = [TensorSpec.of_json(s) for s in message["inputs"]]
        outputs_at = [TensorSpec.of_json(s) for s in message["outputs"]]
        if message.get("fresh") or self._buffers is None:
            inputs = tuple(torch.empty(s.shape, dtype=spec_dtype(s), device=self.device)
                           for s in inputs_at)
            outputs = tuple(self.task.module.make_outputs(dict(shape), self.device))
            self._buffers = (inputs, outputs)
            self.problem_bytes = max(self.problem_bytes, _nbytes((*inputs, *outputs)))
        inputs, outputs = self._buffers
        if message.get("load", True):
            for spec, tensor in zip(inputs_at, inputs, strict=True):
                self.arena.copy_into(spec, tensor)
        poison(outputs, str(message["poison"]))
        self.synchronize()
        try:
            self.launch(str(message["kernel"]), inputs, outputs, shape)
            self.synchronize()
        except CallFailed as failed:
            return {"type": "called", **failed.report}
        self.write_back(outputs, outputs_at, inputs, inputs_at)
        return {"type": "called", "problem": self.tampering()}

    def write_back(self, outputs: Sequence[Any], outputs_at: Sequence[TensorSpec],
                   inputs: Sequence[Any], inputs_at: Sequence[TensorSpec]) -> None:
        """Outputs, then inputs, into the arena; a buffer that no longer fits its place raises
        ``CallFailed`` (its description is the observation)."""
        for what, tensors, specs in (("output", outputs, outputs_at),
                                     ("input", inputs, inputs_at)):
            if len(tensors) != len(specs):
                raise CallFailed({"problem": f"has {len(tensors)} {what}s where {len(specs)} "
                                             f"were expected"})
            for i, (tensor, spec) in enumerate(zip(tensors, specs, strict=True)):
                if type(tensor) is not torch.Tensor:
                    raise CallFailed({"problem": f"{what} {i} is a {type(tensor).__name__}, "
                                                f"not a torch.Tensor"})
                try:
                    self.arena.write(spec, tensor)
                except Exception as exc:
                    raise CallFailed({"problem": f"{what} {i} cannot be returned: {exc}"}) \
                        from None


def _nbytes(tensors: Sequence[Any]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def guarded(action: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``action()``, with a ``CallFailed`` on the way turned into its raw report."""
    try:
        return action()
    except CallFailed as failed:
        return {"type": "called", **failed.report}
