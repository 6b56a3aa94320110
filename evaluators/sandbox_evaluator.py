"""``SandboxEvaluator``: the evaluation protocol for one task, one language, one device.

Per candidate: static screen (REJECTED) -> compile through the content-hash cache
(COMPILE_ERROR) -> run phase in a long-lived sandbox process with a wall-clock limit (TIMEOUT,
RUNTIME_ERROR; the process is replaced before the next candidate) -> correctness on every tuning
shape and seed, then the held-out shapes (INCORRECT, or REJECTED for a modified input) -> timing
interleaved with the task's starting kernel, with a re-check of the last timed outputs.

Speedups and the roofline are derived here, from times the sandbox reports and from figures it
measured before any candidate ran (machine bandwidth and flops, eager PyTorch times). A shape
timed beyond ``ROOFLINE_MARGIN`` times the roofline is a broken measurement or a cheat, never a
result (REJECTED); the check needs flushed caches and is skipped when ``flush_cache`` is off.
"""

from __future__ import annotations

import math
import time
import weakref
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any

from ..search.candidate import Candidate
from ..search.evaluation import Evaluation, ShapeResult, Status
from ..search.evaluator import CompileResult, Evaluator
from ..search.task import TaskError, load_task
from .compile_cache import Build, CompileCache
from .crash import describe_exit
from .languages import get_language
from .machine import MachineFigures, describe_device
from .sandbox import (
    HEALTH_CHECK,
    Crashed,
    Progress,
    Replied,
    Sandbox,
    TimedOut,
    raise_fault,
)
from .screen import screen
from .settings import EvaluatorSettings

ROOFLINE_MARGIN = 1.5
# Metrics the sandbox may add besides timing_rel_se (GPU: per-shape timing mode and GPU state,
# torch.profiler kernels, Nsight Compute), passed through as reported.
_PASSED_METRICS = ("timing", "profile", "ncu")
_TEXT_FIELDS = {"shape"}
_INT_FIELDS = {"samples"}
_BOOL_FIELDS = {"correct"}


class MalformedReply(Exception):
    """A result frame that does not follow the protocol (a tampered or broken sandbox)."""


class SandboxEvaluator(Evaluator):
    """Judges candidates of the task at ``task_path`` in ``language`` on ``settings.device``.

    Construction loads the task and checks the configuration (``ValueError``/``TaskError`` on a
    bad one); the sandbox process starts on the first ``evaluate`` (a few seconds: torch,
    machine figures, eager timing) and is reused until a candidate crashes, times out or leaves
    it unhealthy. ``compile`` never starts it, so a compile pool can build with its own instance
    (instances pickle without their sandbox). ``evaluate`` raises only for what is not the
    candidate's fault: ``TaskError`` (e.g. the starting kernel fails its own task) or
    ``SandboxError`` (the sandbox cannot start, or a bug).
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
        self.cache = CompileCache(self.settings.cache_dir)
        self._shapes = {s.label: s for s in self.task.tuning_shapes}
        self._device = describe_device(self.settings.device)
        self._sandbox: Sandbox | None = None
        self._release: weakref.finalize | None = None
        self._ready: dict[str, Any] = {}

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
        """Build ``candidate`` into the cache; a source the screen refuses is not built
        (``rejected=True``, the screen's finding as the log)."""
        return self._build(candidate).result

    def _build(self, candidate: Candidate) -> Build:
        if candidate.language != self.language.name:
            raise ValueError(f"candidate {candidate.id} is in {candidate.language!r}; this "
                             f"evaluator judges {self.language.name!r}")
        finding = screen(candidate.source, self.language.screen_rules)
        if finding is not None:
            return Build(CompileResult(candidate.id, ok=False, seconds=0.0,
                                       log=finding.message, rejected=True), None)
        return self.cache.build(self.language, candidate, self.settings.compile_timeout_s)

    def evaluate(self, candidate: Candidate) -> Evaluation:
        started = time.perf_counter()
        evaluation = self._evaluate(candidate)
        return replace(evaluation, eval_s=time.perf_counter() - started)

    def _evaluate(self, candidate: Candidate) -> Evaluation:
        build = self._build(candidate)
        if build.artifact is None:
            return replace(build.result.as_evaluation(), device=self._device)
        spec = candidate.spec_dict or self.start_candidate.spec_dict
        self.language.check_spec(candidate.entry, spec)
        spawn_started = time.perf_counter()
        sandbox = self._live_sandbox()
        spawn_s = time.perf_counter() - spawn_started
        outcome = sandbox.request({"type": "evaluate", "artifact": str(build.artifact),
                                   "entry": candidate.entry, "spec": spec},
                                  self.settings.run_timeout_s)
        if not isinstance(outcome, Replied) or outcome.message.get("type") != "result" \
                or outcome.message.get("healthy") is not True:
            self._discard_sandbox()  # the next candidate gets a fresh process
        return self._judge(candidate, outcome, build, spawn_s)

    def _judge(self, candidate: Candidate, outcome: Crashed | TimedOut | Replied, build: Build,
               spawn_s: float) -> Evaluation:
        """The verdict on what the sandbox did with ``candidate``."""
        assert build.artifact is not None
        common = {"compile_s": build.result.seconds,
                  "resources": {"artifact_bytes": build.artifact.stat().st_size,
                                "binary": build.result.binary},
                  "metrics": {**self._metrics(), "sandbox_start_s": spawn_s}}
        if isinstance(outcome, TimedOut):
            return self._verdict(candidate, Status.TIMEOUT, _timeout_message(outcome),
                                 _where_shapes(outcome.progress), **common)
        if isinstance(outcome, Crashed):
            return self._verdict(candidate, Status.RUNTIME_ERROR, _crash_message(outcome),
                                 _where_shapes(outcome.progress), **common)
        if outcome.message.get("type") == "fault":
            raise_fault(outcome.message, "the sandbox failed on something other than the "
                                         "candidate")
        try:
            status, message, shapes, extra = self._parse_result(outcome.message)
        except MalformedReply as exc:
            self._discard_sandbox()
            return self._verdict(candidate, Status.RUNTIME_ERROR,
                                 f"the sandbox sent a malformed result ({exc}); was the result "
                                 f"channel written by the kernel?", **common)
        if status is Status.OK:
            status, message = _roofline_verdict(shapes, self.settings.flush_cache, message)
        common["metrics"].update(extra)
        reported = outcome.message.get("resources")
        if isinstance(reported, dict):
            common["resources"].update({str(k): v for k, v in reported.items()})
        return self._verdict(candidate, status, message, shapes, **common)

    def _verdict(self, candidate: Candidate, status: Status, message: str,
                 shapes: tuple[ShapeResult, ...] = (), compile_s: float = 0.0,
                 resources: dict[str, Any] | None = None,
                 metrics: dict[str, Any] | None = None) -> Evaluation:
        return Evaluation(candidate_id=candidate.id, status=status, message=message,
                          shapes=shapes, compile_s=compile_s, device=self._device,
                          resources=resources or {}, metrics=metrics or {})

    def _live_sandbox(self) -> Sandbox:
        """The running sandbox, started (with the compiled starting kernel) when there is none."""
        if self._sandbox is not None and self._sandbox.alive:
            return self._sandbox
        self._discard_sandbox()
        start = self._build(self.start_candidate)
        if start.artifact is None:
            raise TaskError(f"task {self.task.name!r}: the starting {self.language.name} "
                               f"kernel does not compile:\n{start.result.log}")
        sandbox = Sandbox(self.settings.memory_limit_mb)
        self._release = weakref.finalize(self, sandbox.close)
        settings = {**asdict(self.settings), "cache_dir": str(self.settings.cache_dir)}
        startup_s = 120.0 + 2 * self.settings.timing_budget_s * len(self.task.tuning_shapes)
        try:
            self._ready = sandbox.start(
                {"type": "start", "task": str(self.task.path), "language": self.language.name,
                 "settings": settings,
                 "start": {"artifact": str(start.artifact), "entry": self.start_candidate.entry,
                           "spec": self.start_candidate.spec_dict}}, startup_s)
        except BaseException:
            self._discard_sandbox()
            raise
        self._sandbox = sandbox
        self._device = self._ready["machine"]["device"]
        return sandbox

    def _discard_sandbox(self) -> None:
        if self._release is not None:
            self._release()
        self._sandbox, self._release = None, None

    def close(self) -> None:
        """Stop the sandbox and delete its scratch folder; the compile cache stays."""
        self._discard_sandbox()

    def _machine(self) -> MachineFigures:
        return MachineFigures(**self._ready["machine"])

    def _metrics(self) -> dict[str, Any]:
        s = self.settings
        return {**self._machine().as_metrics(), "flush_bytes": self._ready["flush_bytes"],
                "flush_cache": s.flush_cache, "warmup": s.warmup, "min_repeats": s.min_repeats,
                "max_repeats": s.max_repeats, "target_rel_se": s.target_rel_se,
                "timing_budget_s": s.timing_budget_s, "seeds": s.seeds,
                "check_heldout": s.check_heldout, "torch_threads": 1,
                "extra_checks": [c["shape"] | {"scale": c["scale"]} for c in s.extra_checks],
                "extra_checks_dropped": dict(self._ready.get("dropped_checks", {})),
                "roofline_margin": ROOFLINE_MARGIN}

    def _parse_result(self, message: dict[str, Any]
                      ) -> tuple[Status, str, tuple[ShapeResult, ...], dict[str, Any]]:
        try:
            status = Status(message["status"])
            text = str(message["message"])
            raw_shapes = message["shapes"]
            rel_se = message["metrics"].get("timing_rel_se", {})
            if not isinstance(raw_shapes, list) or not isinstance(rel_se, dict):
                raise MalformedReply("shapes must be a list and timing_rel_se a dict")
            shapes = tuple(self._shape_result(raw, status) for raw in raw_shapes)
            extra = {"timing_rel_se": {str(k): float(v) for k, v in rel_se.items()}} \
                if rel_se else {}
            extra.update({k: message["metrics"][k] for k in _PASSED_METRICS
                          if k in message["metrics"]})
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise MalformedReply(f"{type(exc).__name__}: {exc}") from None
        if status is Status.OK and sorted(s.shape for s in shapes) != sorted(self._shapes):
            raise MalformedReply("an OK result must time every tuning shape exactly once")
        return status, text, shapes, extra

    def _shape_result(self, raw: Any, status: Status) -> ShapeResult:
        """A ShapeResult from the sandbox's raw fields, with speedups and roofline derived here."""
        if not isinstance(raw, dict):
            raise MalformedReply("a shape result is not an object")
        values: dict[str, Any] = {}
        for f in fields(ShapeResult):
            if f.name not in raw:
                continue
            value = raw[f.name]
            if f.name in _TEXT_FIELDS:
                values[f.name] = str(value)
            elif f.name in _INT_FIELDS:
                values[f.name] = int(value)
            elif f.name in _BOOL_FIELDS:
                values[f.name] = bool(value)
            else:
                values[f.name] = float(value)
        result = ShapeResult(**values)
        if status is not Status.OK:
            return result
        if not (result.time_us > 0 and result.start_time_us > 0):
            raise MalformedReply(f"non-positive time on shape {result.shape}")
        shape = self._shapes.get(result.shape)
        if shape is None:
            raise MalformedReply(f"unknown shape {result.shape!r}")
        eager = float(self._ready["eager_us"].get(result.shape, math.nan))
        moved, flops = self.task.roofline(shape)
        ideal_us = self._machine().ideal_seconds(moved, flops) * 1e6
        return replace(result, eager_time_us=eager,
                       speedup_vs_start=result.start_time_us / result.time_us,
                       speedup_vs_eager=eager / result.time_us,
                       speedup_vs_compile=math.nan,  # torch.compile is not measured on CPU
                       roofline_fraction=ideal_us / result.time_us)


def _where(progress: Progress | None) -> str:
    if progress is None:
        return "before the first shape"
    if progress.phase == HEALTH_CHECK:
        return (f"while re-checking the starting kernel on shape {progress.shape} after this "
                f"candidate ran (the candidate left the process corrupted, e.g. by writing "
                f"outside its outputs)")
    if progress.phase == "held-out":
        return f"on held-out shape {progress.shape}"
    return f"on shape {progress.shape} ({progress.phase})"


def _where_shapes(progress: Progress | None) -> tuple[ShapeResult, ...]:
    return (ShapeResult(shape=progress.shape),) if progress is not None else ()


def _with_log(message: str, log_tail: str) -> str:
    return f"{message}\nsandbox log (tail):\n{log_tail}" if log_tail else message


def _timeout_message(outcome: TimedOut) -> str:
    return _with_log(f"the run phase exceeded run_timeout_s={outcome.limit_s:g} s "
                     f"{_where(outcome.progress)} and the sandbox was killed — an endless loop, "
                     f"or a kernel far too slow for this shape", outcome.log_tail)


def _crash_message(outcome: Crashed) -> str:
    if outcome.detail:
        text = f"{outcome.detail} {_where(outcome.progress)}"
    else:
        text = describe_exit(outcome.returncode, _where(outcome.progress))
    return _with_log(text, outcome.log_tail)


def _roofline_verdict(shapes: tuple[ShapeResult, ...], flushed: bool,
                      message: str) -> tuple[Status, str]:
    """REJECTED when a shape beats the roofline by more than the margin (flushed caches only)."""
    if not flushed:
        return Status.OK, message
    for s in shapes:
        if s.roofline_fraction > ROOFLINE_MARGIN:
            return Status.REJECTED, (
                f"shape {s.shape} timed at {s.roofline_fraction:.2f}x the roofline "
                f"({s.time_us:.2f} us measured): faster than the machine allows, so the kernel "
                f"skips work or the measurement is broken; not reported as a result")
    return Status.OK, message
