"""``SandboxEvaluator``: the evaluation protocol for one task, one language, one device.

Per candidate: static screen (REJECTED) -> compile through the content-hash cache
(COMPILE_ERROR) -> a fresh runner process, prepared as a warm spare while the previous candidate
was judged, loads the candidate (RUNTIME_ERROR) -> correctness on every tuning shape and seed,
then the held-out shapes and the extra checks (INCORRECT, or REJECTED for a modified input or a
call that does what a kernel may not; ``evaluate_on`` checks on seeds it is given, a
confirmation's secret ones) -> timing interleaved with the starting kernel, with the
returned copies re-checked and the reported times cross-checked against wall time
(evaluators/judge/timing.py) -> on a GPU, what a host-code kernel launches -> the runner's whole
process group is killed. A crash is RUNTIME_ERROR with the runner's log, a hang TIMEOUT.

The evaluator holds what every candidate is judged against (the calibration, the references,
the spare runners, the memory plan); from the runner on, one candidate's evaluation is a
``Judgement`` (evaluators/judge/judgement.py), which holds that candidate's state.

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
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from ...search import (
    Candidate,
    CompileResult,
    Evaluation,
    Evaluator,
    Screen,
    Shape,
    load_task,
)
from ..languages import get_language
from ..languages.compile_cache import Build
from ..measure.machine import describe_device
from ..settings import EvaluatorSettings
from .builder import SandboxBuilder
from .calibration import calibrate, prepare_message
from .deadlines import Deadline, run_deadline, startup_deadline
from .figures import ROOFLINE_MARGIN, Calibration
from .judgement import Judgement
from .memory_plan import MemoryPlan
from .references import References
from .runner_process import SandboxError
from .spares import Spares
from .trial import Trial

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
        return self._timed_evaluation(candidate, tuple(range(self.settings.seeds)))

    def evaluate_on(self, candidate: Candidate, seeds: tuple[int, ...]) -> Evaluation:
        """``evaluate`` with the checks on ``seeds`` instead of 0 .. ``settings.seeds`` - 1 (a
        confirmation's secret seeds, search/confirm.py): every tuning shape, held-out shape and
        extra check on each of them. At most ``settings.seeds`` of them: the run phase's limit
        is for that many. Each (shape, seed)'s inputs and reference are computed once and kept
        with the others (``References``), so the kernels and repeats of a confirmation that
        share its seeds share them."""
        seeds = tuple(seeds)
        if not seeds or len(seeds) > self.settings.seeds or len(set(seeds)) != len(seeds) \
                or any(isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < 1 << 63
                       for x in seeds):
            raise ValueError(f"evaluate_on: seeds must be 1 to {self.settings.seeds} distinct "
                             f"integers in [0, 2**63) (EvaluatorSettings.seeds bounds the "
                             f"count), got {seeds!r}")
        return self._timed_evaluation(candidate, seeds)

    def evaluate_screened(self, candidate: Candidate, screen: Screen) -> Evaluation:
        """``evaluate``, timing ``screen.shapes`` first: a candidate that could reach the bar
        on none of them is ``SCREENED_OUT`` there, its other shapes checked but not timed
        (search/screening.py). The judgement computes this, not the runner."""
        labels = {shape.label for shape in self.task.tuning_shapes}
        if any(label not in labels for label in screen.shapes):
            raise ValueError(f"evaluate_screened: the screen's shapes {screen.shapes!r} are not "
                             f"all tuning shapes of {self.task.name!r}")
        return self._timed_evaluation(candidate, tuple(range(self.settings.seeds)), screen)

    def _timed_evaluation(self, candidate: Candidate, seeds: tuple[int, ...],
                          screen: Screen | None = None) -> Evaluation:
        started = time.perf_counter()
        with one_thread():
            evaluation = self._evaluate(candidate, seeds, screen)
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

    def _evaluate(self, candidate: Candidate, seeds: tuple[int, ...],
                  screen: Screen | None) -> Evaluation:
        began = time.perf_counter()
        build = self._build(candidate)
        built_s = time.perf_counter() - began  # nonzero beyond a lookup: nobody built it ahead
        if build.artifact is None:
            return replace(build.result.as_evaluation(), device=self._device)
        spec = candidate.spec_dict or self.start_candidate.spec_dict
        self.language.check_spec(candidate.entry, spec)
        calibration, references, spares = self._ready()
        began = time.perf_counter()
        runner = spares.take()
        waited = time.perf_counter() - began
        deadline = self.run_deadline()
        judgement = Judgement(
            candidate=candidate, build=build, spec=spec, task=self.task, language=self.language,
            settings=self.settings, calibration=calibration, references=references,
            spares=spares, memory=self._memory, deadline=deadline,
            trial=Trial(runner, deadline.seconds), phases={"runner_wait": waited},
            built_s=built_s, seeds=seeds, screen=screen)
        return judgement.evaluation(self._device)


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


__all__ += ["SandboxError"]
