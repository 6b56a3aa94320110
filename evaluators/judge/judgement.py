"""``Judgement``: one candidate judged in the runner it was given, from loading to verdict.

The evaluator (evaluator.py) builds the candidate, takes a runner from its spares and hands both
to a ``Judgement``, with what it judges every candidate against (the calibration, the
references, the memory plan, the run's limit). ``evaluation`` then loads the candidate, checks
it on the tuning shapes, the held-out shapes and the extra checks (checks.py), closes the
runner's compile window, times every tuning shape (timing.py), reads the kernel's resources and
on a GPU observes what it launches, and returns the ``Evaluation``: the verdict and what was
measured on the way, which the judgement keeps in its fields as it goes. The runner is closed
whatever happens.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from ...search import (
    CHECK_SEEDS,
    Candidate,
    Evaluation,
    EvaluationCost,
    KernelResources,
    Profile,
    Screen,
    Shape,
    ShapeResult,
    Status,
    Task,
    TaskError,
    kernel_resources,
)
from ..languages import KernelLanguage
from ..languages.compile_cache import Build
from ..measure.device_arena import arena_refusal
from ..measure.profiling import ncu_profile
from ..measure.shared_memory import BaseArena
from ..protocol import CANDIDATE, JIT_CACHE
from ..settings import EvaluatorSettings
from .calibration import load_start
from .checks import EXTRA, HELD_OUT, TUNING, Checked, Checker, ShapeErrors
from .deadlines import Deadline
from .figures import (
    ROOFLINE_MARGIN,
    Calibration,
    derive_shape_figures,
    own_floor_us,
    roofline_verdict,
)
from .memory_plan import MemoryPlan
from .observations import foreign_launches
from .references import References, release_device_memory
from .runner_process import Crashed, SandboxError
from .spares import Spares
from .timing import CleanFigures, ShapeTimer
from .trial import CandidateFault, Stopped, Trial, field, malformed
from .verdicts import crash_message, timeout_message

Verdict = tuple[Status, str, tuple[ShapeResult, ...]]


@dataclass
class Judgement:
    """One candidate's evaluation in its runner.

    Given when it starts: the candidate, its build and its spec; the evaluator's task,
    language, settings, calibration, references, spares and memory plan; the run's limit
    (``deadline``) and the ``trial`` (the runner taken for this candidate, under that limit);
    ``phases``, the seconds of the phases so far (the wait for the runner), ``built_s``,
    what the evaluation waited for the build, and ``seeds``, the seeds its correctness is
    checked on (the settings' 0 .. seeds - 1, or a confirmation's secret ones); ``screen``, where
    given, the shapes timed first and the bar (search/screening.py). Filled in as it goes:
    ``screened_out``, ``metrics``, ``resources``
    (the artifact's bytes, then what the runner reports), ``kernel_resources``, ``profile``,
    ``runner_s`` (the runner's warm-up seconds by step) and ``compiled`` (what the runner's
    JIT compiled during the checks)."""

    candidate: Candidate
    build: Build
    spec: dict[str, Any]
    task: Task
    language: KernelLanguage
    settings: EvaluatorSettings
    calibration: Calibration
    references: References
    spares: Spares
    memory: MemoryPlan | None
    deadline: Deadline
    trial: Trial
    phases: dict[str, float]
    built_s: float
    seeds: tuple[int, ...]
    metrics: dict[str, Any] = dataclasses.field(init=False)
    resources: dict[str, Any] = dataclasses.field(init=False)
    screen: Screen | None = None
    screened_out: bool = False
    kernel_resources: tuple[KernelResources, ...] = ()
    profile: Profile | None = None
    runner_s: dict[str, float] = dataclasses.field(default_factory=dict)
    compiled: dict[str, float] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.metrics = self._protocol_metrics()
        self.resources = {"artifact_bytes": self.build.artifact.stat().st_size}

    @property
    def arena(self) -> BaseArena:
        return self.trial.runner.arena

    @property
    def target(self) -> dict[str, Any]:
        """The candidate as the runner loads it: artifact, entry point and spec."""
        return {"artifact": str(self.build.artifact), "entry": self.candidate.entry,
                "spec": self.spec}

    def evaluation(self, device: str) -> Evaluation:
        """The candidate's ``Evaluation`` on ``device``; the runner is closed afterwards."""
        runner = self.trial.runner
        refusal = arena_refusal(self.settings.device)
        cost = {"phase_s": self.phases, "request_s": self.trial.request_s,
                "runner_start_s": runner.ready_s, "runner_started_as": runner.started_as,
                "arena": runner.arena.kind if not refusal else f"host ({refusal})"}
        try:
            status, message, shapes = self.verdict()
            self.metrics["run_limit_s"] = self.deadline.seconds
            self.metrics["references"] = self.references.metrics()
        finally:
            runner.close()
            if runner.unkillable:
                self.metrics["unkillable"] = runner.unkillable
        cost.update(runner_s=self.runner_s, jit_compiles=int(self.compiled.get("compiles", 0)),
                    build_wait_s=(0.0 if self.build.result.cached else self.built_s)
                    + float(self.compiled.get("seconds", 0.0)))
        if runner.unkillable:
            message += f"\nthe runner could not be stopped: {runner.unkillable}"
        calibration = self.calibration
        return Evaluation(candidate_id=self.candidate.id, status=status, message=message,
                          shapes=shapes, compile_s=self.build.result.seconds, device=device,
                          resources=self.resources, metrics=self.metrics,
                          binary=self.build.result.binary or "", machine=calibration.machine,
                          baselines=calibration.baselines.source(),
                          dropped_checks=dict(calibration.dropped_checks),
                          kernel_resources=self.kernel_resources, profile=self.profile,
                          cost=EvaluationCost(**cost))

    def verdict(self) -> Verdict:
        """Status, message and shape results: a fault of the candidate, a crash or a timeout
        is its verdict."""
        try:
            return self._judge()
        except CandidateFault as fault:
            return fault.status, fault.message, fault.shapes
        except Stopped as stop:
            shapes = (ShapeResult(shape=stop.shape),) if stop.shape else ()
            if isinstance(stop.outcome, Crashed):
                if stop.outcome.returncode is not None and stop.outcome.returncode < 0:
                    # a signal this judge did not send: a pool tells a candidate's crash from
                    # its worker's shutdown, which kills the worker's children first, by it
                    self.metrics["runner_signal"] = -stop.outcome.returncode
                return Status.RUNTIME_ERROR, crash_message(stop.outcome, stop.where), shapes
            return Status.TIMEOUT, timeout_message(stop.outcome, stop.where,
                                                   self.deadline.describe()), shapes

    def _judge(self) -> Verdict:
        s = self.settings
        clock = time.perf_counter()
        self._load()
        checked = self._check()
        self.phases["correctness"] = time.perf_counter() - clock
        self.compiled = self._seal()
        # the checks' copies: timing needs the room (on a problem of a GiB or more)
        release_device_memory(s.device, self.memory.footprint if self.memory else None)
        clock = time.perf_counter()
        self.spares.settle()  # the next runner's start-up must not share the CPU with timing
        self.phases["spare_wait"] = time.perf_counter() - clock
        clock = time.perf_counter()
        shapes = self._time(checked.errors)
        self.phases["timing"] = time.perf_counter() - clock
        heldout = len(self.task.heldout_shapes) if s.check_heldout else 0
        message = (f"correct on {len(shapes)} tuning shapes x {self._seeds_in_words()}, "
                   f"{heldout} held-out shapes and {len(self.calibration.checks)} extra checks")
        status, message = roofline_verdict(shapes, s.flush_cache, message)
        if status is Status.OK and self.screened_out and self.screen is not None:
            untimed = sum(1 for r in shapes if not r.time_us > 0)
            return Status.SCREENED_OUT, self.screen.message(shapes, untimed), shapes
        clock = time.perf_counter()
        self._observe()  # what the profile role reads (not for a kernel screened out)
        self.phases["profiling"] = time.perf_counter() - clock
        return status, message, shapes

    def _seeds_in_words(self) -> str:
        """"3 seeds", or, checked on others than the settings' own, "3 secret seeds"."""
        own = self.seeds == tuple(range(self.settings.seeds))
        return f"{len(self.seeds)} {'' if own else 'secret '}seeds"

    def _load(self) -> None:
        """The candidate loaded in the runner; the isolation it runs under goes to the
        metrics."""
        runner = self.trial.runner
        if self.build.prebuilt is not None:  # the runner's JIT finds the candidate's kernels built
            runner.stage_tree(self.build.prebuilt, JIT_CACHE)
        loaded = self.trial.ask({"type": "load", **self.target,
                                 "artifact": runner.stage(self.build.artifact)}, "loaded")
        self.trial.call_problem(loaded, "while loading", "")
        isolation = field(loaded, "isolation", dict)  # the level, and its parts
        self.metrics.update({str(k): str(v)[:200] for k, v in isolation.items()
                             if str(k).startswith("isolation")})

    def _check(self) -> Checked:
        """Correctness on the tuning shapes, then on the held-out shapes and the extra checks,
        whose failures list the tuning shapes passed in front of their own."""
        s, task, extra = self.settings, self.task, self.calibration.checks
        checker = Checker(self.trial, self.arena, self.references, task)
        tuning = checker.check_shapes(CANDIDATE, TUNING, task.tuning_shapes, self.seeds)
        if s.check_heldout and task.heldout_shapes:
            try:
                checker.check_shapes(CANDIDATE, HELD_OUT, task.heldout_shapes, self.seeds)
            except CandidateFault as fault:
                fault.message += (" — held-out shapes are never tuned on; a kernel that is "
                                  "right only on the tuning shapes is specialised to them")
                fault.shapes = (*tuning.passed, *fault.shapes)
                raise
        if extra:
            try:
                checker.check_shapes(CANDIDATE, EXTRA, [c["shape"] for c in extra], self.seeds,
                                     [c["scale"] for c in extra])
            except CandidateFault as fault:
                fault.shapes = (*tuning.passed, *fault.shapes)
                raise
        return tuning

    def _seal(self) -> dict[str, float]:
        """Close the runner's compile window; a process the candidate left running is
        REJECTED. What the runner says its JIT compiled during the checks (diagnostics)."""
        self.trial.at("after the checks (closing the compile window)")
        reply = self.trial.ask({"type": "seal"}, "sealed")
        self.trial.call_problem(reply, "after the checks", "")
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

    def _time(self, errors: dict[str, ShapeErrors]) -> tuple[ShapeResult, ...]:
        """Every tuning shape timed against the starting kernel, with its figures; the largest
        errors are those of the checks (``errors``) and of the copies rechecked in timing."""
        task, calibration = self.task, self.calibration
        timer = ShapeTimer(self.trial, self.arena, self.references, task, self.settings)
        results, rel_se, details = [], {}, {}
        screen = self.screen
        order = list(task.tuning_shapes)
        if screen is not None:  # its shapes first; the rest only if it could reach the bar
            rank = {label: i for i, label in enumerate(screen.shapes)}
            order.sort(key=lambda shape: rank.get(shape.label, len(rank)))
        began = time.perf_counter()
        for shape in order:
            timed = timer.time(shape, calibration.clean.get(shape.label),
                               own_floor_us(calibration.machine), self._clean_again)
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
                self.runner_s[step] = self.runner_s.get(step, 0.0) + seconds
            if screen is not None and len(results) == len(screen.shapes):
                self.screened_out = screen.drops(results)
                if self.screened_out:
                    break
        self.spares.refill()  # the spare a clean measurement took (``_clean_again``), if any
        self.metrics.update({"timing_rel_se": rel_se, "timing": details})
        if screen is not None:
            self.metrics["screen"] = self._screen_metrics(len(results), time.perf_counter() - began)
        timed = {r.shape: r for r in results}
        return tuple(timed.get(shape.label) or ShapeResult(
            shape=shape.label, correct=True, max_abs_err=errors[shape.label].max_abs_err,
            max_rel_err=errors[shape.label].max_rel_err) for shape in task.tuning_shapes)

    def _screen_metrics(self, timed: int, seconds: float) -> dict[str, Any]:
        """What the screen did: its shapes, the bar's source, whether the candidate was
        screened out, the shapes timed and, for one screened out, the timing seconds the
        untimed shapes would have taken at this candidate's rate (``saved_s``)."""
        assert self.screen is not None
        untimed = len(self.task.tuning_shapes) - timed
        return {"shapes": list(self.screen.shapes), "against": self.screen.against,
                "screened_out": self.screened_out, "timed_shapes": timed,
                "timing_s": seconds,
                "saved_s": seconds / timed * untimed if self.screened_out and timed else 0.0}

    def _clean_again(self, shape: Shape) -> CleanFigures | None:
        """The starting kernel's clean figures on ``shape`` measured now, for a canary that
        disagreed with the calibration's: in a spare runner that never held candidate code,
        the starting kernel loaded there in the candidate's place (as the calibration does),
        and the next spare started only once every shape is timed (its start-up beside the
        candidate's second measurement would disturb what that one is held to). They replace
        the calibration's for the evaluator's life and are kept in the metrics
        (``clean_remeasured``).

        None, and the canary's verdict stands, on a GPU (the figures there are device time,
        which the host's load does not move, and the candidate's runner, alive, could keep the
        device busy while the clean one is timed; on the CPU the judge's clock is each runner's
        own CPU time, which the candidate's threads do not reach), where the memory plan keeps
        no spare beside an evaluation, or where the clean runner fails."""
        if self.settings.device.startswith("cuda") or not self.spares.in_advance:
            return None
        self.trial.at(f"on shape {shape.label} (timing the starting kernel again)", shape.label)
        before = self.calibration.clean.get(shape.label)
        try:
            runner = self.spares.take(refill=False)
        except SandboxError:
            return None
        try:
            trial = Trial(runner, self.spares.startup_s + self.deadline.seconds, trusted=True)
            load_start(trial, self.spares.prepare)
            fresh = CleanFigures.of(ShapeTimer(trial, runner.arena, self.references, self.task,
                                               self.settings).time(shape, None))
        except (CandidateFault, Stopped, SandboxError, TaskError):
            return None
        finally:
            runner.close()
        self.calibration.remeasured(shape.label, fresh)
        self.metrics.setdefault("clean_remeasured", {})[shape.label] = {
            "burst_us_before": before.burst_us if before else None,
            "burst_us_now": fresh.burst_us}
        return fresh

    def _observe(self) -> None:
        """Resources; on a GPU what the candidate launches (a verdict for host-code kernels),
        the profile and Nsight Compute."""
        s, task, trial = self.settings, self.task, self.trial
        trial.at("while reading the kernel's resources")
        reply = trial.ask({"type": "resources"}, "resources")
        trial.call_problem(reply, "while reading the kernel's resources", "")
        resources = field(reply, "resources", dict)
        self.kernel_resources = kernel_resources(resources.get("kernels"))
        self.resources.update({str(k): v for k, v in resources.items() if k != "kernels"})
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
                self.profile = Profile.parse(launches=kernels)
        if s.ncu:
            ncu = Profile.parse(ncu=self._ncu(resources))
            self.profile = ncu if self.profile is None else \
                replace(self.profile, ncu_shape=ncu.ncu_shape, ncu=ncu.ncu,
                        ncu_error=ncu.ncu_error)

    def _ncu(self, resources: dict[str, Any]) -> dict[str, Any]:
        """Nsight Compute on the largest tuning shape: ``ncu`` started from here on a child
        that loads the candidate (evaluators/measure/ncu_target.py; outside the runner, whose seccomp
        filter allows no process, and outside its namespaces: a known gap, off by default)."""
        task = self.task
        shape = max(task.tuning_shapes, key=lambda x: sum(task.roofline(x)))
        launches = resources.get("launches", [])
        names = sorted({str(x.get("kernel")) for x in launches if isinstance(x, dict)}) \
            if isinstance(launches, list) else []
        settings = {**asdict(self.settings), "cache_dir": str(self.settings.cache_dir)}
        found = ncu_profile({"task": str(task.path), "language": self.language.name,
                             **self.target, "shape": dict(shape), "settings": settings}, names,
                            self.settings.ncu_timeout_s)
        return {"shape": shape.label, **found}

    def _protocol_metrics(self) -> dict[str, Any]:
        """How the candidate is judged: the protocol's settings and the calibration."""
        s, calibration = self.settings, self.calibration
        return {"flush_bytes": calibration.flush_bytes,
                "calibration": "read from the cache" if calibration.cached else "measured",
                "flush_cache": s.flush_cache, "warmup": s.warmup, "min_repeats": s.min_repeats,
                "max_repeats": s.max_repeats, "target_rel_se": s.target_rel_se,
                "timing_budget_s": s.timing_budget_s, "seeds": s.seeds,
                CHECK_SEEDS: list(self.seeds),
                "check_heldout": s.check_heldout, "torch_threads": 1,
                "extra_checks": [dict(c["shape"]) | {"scale": c["scale"]}
                                 for c in s.extra_checks],
                "roofline_margin": ROOFLINE_MARGIN,
                "memory_plan": self.memory.metrics() if self.memory else {}}
