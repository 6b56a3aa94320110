"""``SandboxEvaluator``: the evaluation protocol for one task, one language, one device.

Per candidate: static screen (REJECTED) -> compile through the content-hash cache
(COMPILE_ERROR) -> a fresh runner process, prepared as a warm spare while the previous candidate
was judged, loads the candidate (RUNTIME_ERROR) -> correctness on every tuning shape and seed,
then the held-out shapes and the extra checks (INCORRECT, or REJECTED for a modified input or a
call that does what a kernel may not) -> timing interleaved with the starting kernel, with the
returned copies re-checked and the reported times cross-checked against wall time
(evaluators/judge/timing.py) -> on a GPU, what a host-code kernel launches -> the runner's whole
process group is killed. A crash is RUNTIME_ERROR with the runner's log, a hang TIMEOUT.

The verdict, every reference and every comparison are computed here, in a process that runs no
candidate code; the runner (evaluators/runner/) only calls and times. Speedups and the roofline
come from figures measured once per evaluator by a runner that never loads a candidate
(evaluators/judge/figures.py). A shape timed beyond ``ROOFLINE_MARGIN`` times the roofline is a
broken measurement or a cheat (REJECTED); the check needs flushed caches.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

from ...search.candidate import Candidate
from ...search.evaluation import Evaluation, ShapeResult, Status
from ...search.evaluator import CompileResult, Evaluator
from ...search.measured import EvaluationCost, Profile, kernel_resources
from ...search.task import Shape, load_task
from ..compile_cache import Build
from ..device_arena import arena_refusal
from ..languages import get_language
from ..machine import describe_device
from ..profiling import ncu_profile
from ..protocol import CANDIDATE, JIT_CACHE
from ..settings import EvaluatorSettings
from .builder import SandboxBuilder
from .calibration import calibrate, prepare_message
from .checks import Checker
from .deadlines import Deadline, run_deadline, startup_deadline
from .figures import (
    ROOFLINE_MARGIN,
    Calibration,
    derive_shape_figures,
    roofline_verdict,
)
from .memory_plan import MemoryPlan
from .observations import foreign_launches
from .references import References, release_device_memory
from .runner_process import Crashed, SandboxError
from .spares import Spares
from .timing import ShapeTimer
from .trial import CandidateFault, Stopped, Trial, field, malformed
from .verdicts import crash_message, timeout_message

__all__ = ["ROOFLINE_MARGIN", "SandboxEvaluator"]


class SandboxEvaluator(Evaluator):
    """Judges candidates of the task at ``task_path`` in ``language`` on ``settings.device``.

    Construction loads the task and checks the configuration (``ValueError``/``TaskError`` on a
    bad one). The first ``evaluate`` calibrates (a runner that never holds a candidate checks
    the starting kernel, the extra checks and times the baselines) and starts the first spare
    runner; ``compile`` never starts one, so a compile pool can build with its own instance
    (instances pickle without their processes). ``evaluate`` raises only for what is not the
    candidate's fault: ``StartingKernelFailed`` (the starting kernel fails its own task: it
    carries the start's verdict), ``TaskError`` (the task itself is broken) or
    ``SandboxError`` (a runner cannot start, or a bug).
    """

    def __init__(self, task_path: Path | str, language: str,
                 settings: EvaluatorSettings | None = None) -> None:
        self.task_path = Path(task_path)
        self.settings = settings or EvaluatorSettings()
        self.task = load_task(self.task_path, self.settings.device.split(":")[0])
        self.language = get_language(language, self.settings)
        if self.settings.device.split(":")[0] not in self.language.devices:
            raise ValueError(f"EvaluatorSettings.device={self.settings.device!r} cannot run "
                             f"language {language!r}; it runs on: "
                             f"{', '.join(self.language.devices)}")
        self.start_candidate = self.task.starting_candidate(language)
        self.language.check_spec(self.start_candidate.entry, self.start_candidate.spec_dict)
        self._builder = SandboxBuilder(self.task_path, self.language, self.settings, self.task)
        self.cache = self._builder.cache
        self._device = describe_device(self.settings.device)
        self._references: References | None = None
        self._calibration: Calibration | None = None
        self._spares: Spares | None = None
        self._memory: MemoryPlan | None = None
        self._deadline: Deadline | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"task_path": self.task_path, "language": self.language.name,
                "settings": self.settings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["task_path"], state["language"], state["settings"])

    def __enter__(self) -> SandboxEvaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def compile(self, candidate: Candidate) -> CompileResult:
        """Build ``candidate`` into the cache, and its device code ahead of its first call
        where its language compiles there (a Triton kernel on a GPU: evaluators/judge/
        prebuild.py); a source the screen refuses is not built (``rejected=True``, the
        screen's finding as the log). A compile pool needs only this: ``SandboxBuilder``
        does it without loading the task."""
        return self._builder.compile(candidate)

    def _build(self, candidate: Candidate, ahead: bool = False) -> Build:
        return self._builder.build(candidate, ahead)

    def close(self) -> None:
        """Kill the spare runner and delete its scratch folder; the compile cache stays."""
        if self._spares is not None:
            self._spares.close()
            self._spares = None

    # -- evaluation --------------------------------------------------------------------------

    def evaluate(self, candidate: Candidate) -> Evaluation:
        started = time.perf_counter()
        with one_thread():
            evaluation = self._evaluate(candidate)
        return replace(evaluation, eval_s=time.perf_counter() - started)

    def _ready(self) -> tuple[Calibration, References, Spares]:
        """Calibration, references and the spare runners, set up on the first evaluation."""
        if self._calibration is None or self._references is None or self._spares is None:
            start = self._build(self.start_candidate)
            references = References(self.task, self.settings.device)
            self._calibration, self._spares, self._memory = calibrate(
                self, start, references,
                lambda size, in_advance: Spares(size, prepare_message(self, start),
                                                self.settings.memory_limit_mb,
                                                self.startup_s(), in_advance))
            if self._memory is not None:  # as many spares as the memory plan fits
                self._spares.widen(self._memory.spares)
            self._references = references
            # an evaluator dropped without close() still stops its spare
            weakref.finalize(self, self._spares.close)
            self._device = self._calibration.machine.device
        return self._calibration, self._references, self._spares

    def prepare(self) -> dict[str, str]:
        """Calibrate (or read the calibration kept for this task, language, device and
        settings) and start the first spare runner, as the first ``evaluate`` would."""
        with one_thread():
            calibration, _, _ = self._ready()
        return {"calibration": "read from the cache" if calibration.cached else "measured"}

    def startup_s(self) -> float:
        """How long a runner may take to get ready (import torch, load the task, warm up): a
        base, and more for a problem of many bytes (evaluators/judge/deadlines.py)."""
        base = 120.0 + 2 * self.settings.timing_budget_s * len(self.task.tuning_shapes)
        return startup_deadline(self.task, self.settings, base).seconds

    def run_deadline(self) -> Deadline:
        """The run phase's limit: ``run_timeout_s`` and an allowance for the problem's bytes
        (evaluators/judge/deadlines.py)."""
        if self._deadline is None:
            self._deadline = run_deadline(self.task, self.settings,
                                          [Shape.of(c["shape"])
                                           for c in self.settings.extra_checks])
        return self._deadline

    def _evaluate(self, candidate: Candidate) -> Evaluation:
        began = time.perf_counter()
        build = self._build(candidate)
        built_s = time.perf_counter() - began  # nonzero beyond a lookup: nobody built it ahead
        if build.artifact is None:
            return replace(build.result.as_evaluation(), device=self._device)
        spec = candidate.spec_dict or self.start_candidate.spec_dict
        self.language.check_spec(candidate.entry, spec)
        calibration, references, spares = self._ready()
        phases: dict[str, float] = {}
        began = time.perf_counter()
        runner = spares.take()
        phases["runner_wait"] = time.perf_counter() - began
        common = {"compile_s": build.result.seconds,
                  "resources": {"artifact_bytes": build.artifact.stat().st_size},
                  "metrics": self._metrics(calibration), "kernel_resources": (),
                  "profile": None, "runner_s": {}, "compiled": {}}
        deadline = self.run_deadline()
        trial = Trial(runner, deadline.seconds)
        refusal = arena_refusal(self.settings.device)
        cost = {"phase_s": phases, "request_s": trial.request_s, "runner_start_s": runner.ready_s,
                "runner_started_as": runner.started_as,
                "arena": runner.arena.kind if not refusal else f"host ({refusal})"}
        try:
            status, message, shapes = self._run(candidate, build, spec, trial, calibration,
                                                references, spares, phases, common)
            common["metrics"]["run_limit_s"] = deadline.seconds
            common["metrics"]["references"] = references.metrics()
        finally:
            runner.close()
            if runner.unkillable:
                common["metrics"]["unkillable"] = runner.unkillable
        compiled = common["compiled"]
        cost.update(runner_s=common["runner_s"], jit_compiles=int(compiled.get("compiles", 0)),
                    build_wait_s=(0.0 if build.result.cached else built_s)
                    + float(compiled.get("seconds", 0.0)))
        if runner.unkillable:
            message += f"\nthe runner could not be stopped: {runner.unkillable}"
        return Evaluation(candidate_id=candidate.id, status=status, message=message,
                          shapes=shapes, compile_s=common["compile_s"], device=self._device,
                          resources=common["resources"], metrics=common["metrics"],
                          binary=build.result.binary or "", machine=calibration.machine,
                          baselines=calibration.baselines.source(),
                          dropped_checks=dict(calibration.dropped_checks),
                          kernel_resources=common["kernel_resources"],
                          profile=common["profile"], cost=EvaluationCost(**cost))

    def _run(self, candidate: Candidate, build: Build, spec: dict[str, Any], trial: Trial,
             calibration: Calibration, references: References, spares: Spares,
             phases: dict[str, float], common: dict[str, Any]
             ) -> tuple[Status, str, tuple[ShapeResult, ...]]:
        try:
            return self._judge(candidate, build, spec, trial, calibration, references, spares,
                               phases, common)
        except CandidateFault as fault:
            return fault.status, fault.message, fault.shapes
        except Stopped as stop:
            shapes = (ShapeResult(shape=stop.shape),) if stop.shape else ()
            if isinstance(stop.outcome, Crashed):
                return Status.RUNTIME_ERROR, crash_message(stop.outcome, stop.where), shapes
            return Status.TIMEOUT, timeout_message(stop.outcome, stop.where,
                                                   self.run_deadline().describe()), shapes

    def _judge(self, candidate: Candidate, build: Build, spec: dict[str, Any], trial: Trial,
               calibration: Calibration, references: References, spares: Spares,
               phases: dict[str, float], common: dict[str, Any]
               ) -> tuple[Status, str, tuple[ShapeResult, ...]]:
        s, task = self.settings, self.task
        clock = time.perf_counter()
        target = {"artifact": str(build.artifact), "entry": candidate.entry, "spec": spec}
        if build.prebuilt is not None:  # the runner's JIT finds the candidate's kernels built
            trial.runner.stage_tree(build.prebuilt, JIT_CACHE)
        loaded = trial.ask({"type": "load", **target,
                            "artifact": trial.runner.stage(build.artifact)}, "loaded")
        trial.call_problem(loaded, "while loading", "")
        isolation = field(loaded, "isolation", dict)  # "isolation": the level, and its parts
        common["metrics"].update({str(k): str(v)[:200] for k, v in isolation.items()
                                  if str(k).startswith("isolation")})
        checker = Checker(trial, runner_arena(trial), references, task)
        checked: list[ShapeResult] = []
        errors = checker.check_shapes(CANDIDATE, task.tuning_shapes, "correctness", "shape",
                                      s.seeds, checked)
        if s.check_heldout and task.heldout_shapes:
            try:
                checker.check_shapes(CANDIDATE, task.heldout_shapes, "held-out",
                                     "held-out shape", s.seeds, [])
            except CandidateFault as fault:
                fault.message += (" — held-out shapes are never tuned on; a kernel that is "
                                  "right only on the tuning shapes is specialised to them")
                fault.shapes = (*checked, *fault.shapes)
                raise
        if calibration.checks:
            try:
                checker.check_shapes(CANDIDATE, [c["shape"] for c in calibration.checks],
                                     "extra", "extra check", s.seeds, [],
                                     [c["scale"] for c in calibration.checks])
            except CandidateFault as fault:
                fault.shapes = (*checked, *fault.shapes)
                raise
        phases["correctness"] = time.perf_counter() - clock
        common["compiled"] = self._seal(trial)
        # the checks' copies: timing needs the room (on a problem of a GiB or more)
        release_device_memory(s.device, self._memory.footprint if self._memory else None)
        clock = time.perf_counter()
        spares.settle()  # the next runner's start-up must not share the CPU with timing
        phases["spare_wait"] = time.perf_counter() - clock
        clock = time.perf_counter()
        timer = ShapeTimer(trial, runner_arena(trial), references, task, s)
        results, rel_se, details = [], {}, {}
        for shape in task.tuning_shapes:
            timed = timer.time(shape, calibration.clean.get(shape.label))
            shape_errors = errors[shape.label]
            result = ShapeResult(
                shape=shape.label, correct=True, time_us=timed.candidate.median_us,
                time_spread_us=timed.candidate.iqr_us, samples=timed.candidate.samples,
                start_time_us=timed.start.median_us, start_spread_us=timed.start.iqr_us,
                max_abs_err=max(shape_errors.max_abs_err, timed.errors[0]),
                max_rel_err=max(shape_errors.max_rel_err, timed.errors[1]))
            results.append(derive_shape_figures(result, shape, task.roofline(shape),
                                                calibration.machine, calibration.baselines))
            rel_se[shape.label], details[shape.label] = timed.candidate.rel_se, timed.detail
            for step, seconds in timed.detail["runner_warm_s"].items():
                common["runner_s"][step] = common["runner_s"].get(step, 0.0) + seconds
        phases["timing"] = time.perf_counter() - clock
        clock = time.perf_counter()
        common["metrics"].update({"timing_rel_se": rel_se, "timing": details})
        self._observe(trial, common, target)
        phases["profiling"] = time.perf_counter() - clock
        shapes = tuple(results)
        heldout = len(task.heldout_shapes) if s.check_heldout else 0
        message = (f"correct on {len(results)} tuning shapes x {s.seeds} seeds, {heldout} "
                   f"held-out shapes and {len(calibration.checks)} extra checks")
        status, message = roofline_verdict(shapes, s.flush_cache, message)
        return status, message, shapes

    @staticmethod
    def _seal(trial: Trial) -> dict[str, float]:
        """Close the runner's compile window; a process the candidate left running is
        REJECTED. What the runner says its JIT compiled during the checks (diagnostics)."""
        trial.at("after the checks (closing the compile window)")
        reply = trial.ask({"type": "seal"}, "sealed")
        trial.call_problem(reply, "after the checks", "")
        leftover = reply.get("leftover")
        if not isinstance(leftover, list):
            raise malformed("leftover must be a list")
        if leftover:
            raise CandidateFault(Status.REJECTED,
                                 f"the kernel left {len(leftover)} process(es) running after "
                                 f"its calls: a kernel starts no processes")
        compiled = reply.get("compiled")
        return {k: float(compiled[k]) for k in ("compiles", "seconds")
                if isinstance(compiled, dict) and isinstance(compiled.get(k), (int, float))
                and not isinstance(compiled.get(k), bool) and 0 <= compiled[k] < 1e6}

    def _observe(self, trial: Trial, common: dict[str, Any], target: dict[str, Any]) -> None:
        """Resources; on a GPU what the candidate launches (a verdict for host-code kernels),
        the profile and Nsight Compute."""
        s, task = self.settings, self.task
        trial.at("while reading the kernel's resources")
        reply = trial.ask({"type": "resources"}, "resources")
        trial.call_problem(reply, "while reading the kernel's resources", "")
        resources = field(reply, "resources", dict)
        common["kernel_resources"] = kernel_resources(resources.get("kernels"))
        common["resources"].update({str(k): v for k, v in resources.items() if k != "kernels"})
        if not s.device.startswith("cuda"):
            return
        if self.language.host_code or s.profile_kernels:
            trial.at("while observing the kernel's launches (profiling)",
                     task.tuning_shapes[0].label)
            reply = trial.ask({"type": "observe",
                               "shapes": [dict(x) for x in task.tuning_shapes]}, "observed")
            trial.call_problem(reply, "while observing its launches", "")
            kernels = field(reply, "kernels", dict)
            if self.language.host_code:
                finding = foreign_launches(kernels)
                if finding:
                    raise CandidateFault(Status.REJECTED, finding)
            if s.profile_kernels:
                common["profile"] = Profile.parse(launches=kernels)
        if s.ncu:
            ncu = Profile.parse(ncu=self._ncu(target, resources))
            common["profile"] = ncu if common["profile"] is None else \
                replace(common["profile"], ncu_shape=ncu.ncu_shape, ncu=ncu.ncu,
                        ncu_error=ncu.ncu_error)

    def _ncu(self, target: dict[str, Any], resources: dict[str, Any]) -> dict[str, Any]:
        """Nsight Compute on the largest tuning shape: ``ncu`` started from here on a child
        that loads the candidate (evaluators/ncu_target.py; outside the runner, whose seccomp
        filter allows no process, and outside its namespaces: a known gap, off by default)."""
        task = self.task
        shape = max(task.tuning_shapes, key=lambda x: sum(task.roofline(x)))
        launches = resources.get("launches", [])
        names = sorted({str(x.get("kernel")) for x in launches if isinstance(x, dict)}) \
            if isinstance(launches, list) else []
        settings = {**asdict(self.settings), "cache_dir": str(self.settings.cache_dir)}
        found = ncu_profile({"task": str(task.path), "language": self.language.name, **target,
                             "shape": dict(shape), "settings": settings}, names,
                            self.settings.ncu_timeout_s)
        return {"shape": shape.label, **found}

    def _metrics(self, calibration: Calibration) -> dict[str, Any]:
        s = self.settings
        return {"flush_bytes": calibration.flush_bytes,
                "calibration": "read from the cache" if calibration.cached else "measured",
                "flush_cache": s.flush_cache, "warmup": s.warmup, "min_repeats": s.min_repeats,
                "max_repeats": s.max_repeats, "target_rel_se": s.target_rel_se,
                "timing_budget_s": s.timing_budget_s, "seeds": s.seeds,
                "check_heldout": s.check_heldout, "torch_threads": 1,
                "extra_checks": [dict(c["shape"]) | {"scale": c["scale"]}
                                 for c in s.extra_checks],
                "roofline_margin": ROOFLINE_MARGIN,
                "memory_plan": self._memory.metrics() if self._memory else {}}


@contextmanager
def one_thread() -> Iterator[None]:
    """The judge's own tensor work (inputs, references, comparisons) on one thread for the
    evaluation: elementwise work on small tensors gains nothing from more, and on a loaded
    machine a second intra-op thread made a check twenty times slower. Restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def runner_arena(trial: Trial) -> Any:
    return trial.runner.arena


__all__ += ["SandboxError"]
