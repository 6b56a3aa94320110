"""The starting kernel's own verdict, where calibration finds that it fails its task.

Calibration (calibration.py) is where the task's starting kernel first runs: its runner calls it
once on each tuning shape as it starts (the warm-up, where a JIT compiles it), then loads it in
a candidate's place, checks it and times it. A start that does not compile, crashes, hangs,
raises or is wrong there gets the verdict a candidate would get, raised as
``StartingKernelFailed`` whichever kernel was being judged: nothing can be compared with it.

The warm-up is part of the runner's start-up, so a start that hangs there is stopped by the
start-up limit (``SandboxEvaluator.startup_s``, which allows for importing torch on a loaded
machine), not by ``run_timeout_s``, which holds from the checks on; its message says which.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ...search.candidate import Candidate
from ...search.evaluation import Evaluation, ShapeResult, StartingKernelFailed, Status
from .runner_process import Crashed, Replied, RunnerProcess, SandboxError, TimedOut, raise_fault
from .trial import CandidateFault, Stopped, Trial
from .verdicts import crash_message, timeout_message

WARM_UP = "in its warm-up (one call on each tuning shape as its runner started)"


def start_failed(start: Candidate, status: Status, message: str,
                 shapes: Sequence[ShapeResult] = ()) -> StartingKernelFailed:
    """The exception that carries the starting kernel's verdict."""
    return StartingKernelFailed(Evaluation(start.id, status, message, shapes=tuple(shapes)))


class CalibrationRunner(RunnerProcess):
    """The calibration's runner, whose start-up is the starting kernel's first trial."""

    def start_up(self, limit_s: float, start: Candidate) -> dict[str, Any]:
        """The reply to ``prepare``, waited for up to ``limit_s``. ``StartingKernelFailed``
        where the starting kernel crashed, hung, could not load or failed a call in the
        warm-up; ``TaskError`` or ``SandboxError`` where the task or the runner failed."""
        outcome = self._receive(limit_s, self._log_size())
        if isinstance(outcome, Replied) and outcome.message.get("type") == "ready":
            self.ready = outcome.message
            self.ready_s = time.perf_counter() - self.started
            return self.ready
        self.kill()
        if isinstance(outcome, Crashed):
            raise start_failed(start, Status.RUNTIME_ERROR, crash_message(outcome, WARM_UP))
        if isinstance(outcome, TimedOut):
            raise start_failed(start, Status.TIMEOUT, _start_up_timeout(outcome))
        reply = outcome.message
        if reply.get("type") == "called":  # a call of the warm-up raised, or was caught cheating
            try:
                Trial(self, limit_s).call_problem(reply, WARM_UP, "")
            except CandidateFault as fault:
                raise start_failed(start, fault.status, fault.message) from None
        if reply.get("type") == "fault" and reply.get("error") == "LoadError":
            raise start_failed(start, Status.RUNTIME_ERROR, str(reply.get("message", "")))
        if reply.get("type") == "fault":
            raise_fault(reply, "the runner failed to start")
        raise SandboxError(f"the runner answered its start with a {reply.get('type')!r} frame")


def _start_up_timeout(outcome: TimedOut) -> str:
    text = (f"it did not return within the runner's start-up limit of {outcome.limit_s:.4g} s "
            f"{WARM_UP}, and the sandbox was killed — an endless loop, or a kernel far too "
            f"slow for this shape (run_timeout_s holds from the checks on; the start-up limit "
            f"allows for importing torch on a loaded machine)")
    return f"{text}\nsandbox log (tail):\n{outcome.log_tail}" if outcome.log_tail else text


def fault_after_loading(start: Candidate, fault: CandidateFault) -> StartingKernelFailed:
    """A candidate's verdict found against the starting kernel, loaded in a candidate's place."""
    return start_failed(start, fault.status, fault.message, fault.shapes)


def stop_after_loading(start: Candidate, stop: Stopped) -> StartingKernelFailed:
    """The runner died or ran past the calibration's limit with the starting kernel loaded."""
    shapes = (ShapeResult(shape=stop.shape),) if stop.shape else ()
    if isinstance(stop.outcome, Crashed):
        return start_failed(start, Status.RUNTIME_ERROR, crash_message(stop.outcome, stop.where),
                            shapes)
    limit = (f"{stop.outcome.limit_s:.4g} s (the calibration's: the start-up limit and "
             f"run_timeout_s together)")
    return start_failed(start, Status.TIMEOUT, timeout_message(stop.outcome, stop.where, limit),
                        shapes)
