"""The starting kernel's own verdict, where calibration finds that it fails its task.

Calibration (calibration.py) is where the task's starting kernel first runs: its runner calls it
once on each tuning shape as it starts (the warm-up, where a JIT compiles it), then loads it in
a candidate's place, checks it and times it. A start that does not compile, crashes, hangs,
raises or is wrong there gets the verdict a candidate would get, raised as
``StartingKernelFailed`` whichever kernel was being judged: nothing can be compared with it.

The warm-up is part of the runner's start-up, which has a limit of its own
(``SandboxEvaluator.startup_s``: importing torch on a loaded machine); the runner says when the
warm-up calls begin (a ``warming`` frame), and from then on the run's limit
(``run_timeout_s`` and the allowance for the problem's bytes) holds, as for a candidate's calls.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ...search import Candidate, Evaluation, ShapeResult, StartingKernelFailed, Status
from .deadlines import Deadline
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

    def start_up(self, limit_s: float, start: Candidate, run_limit: Deadline) -> dict[str, Any]:
        """The reply to ``prepare``, waited for up to ``limit_s``, and up to ``run_limit`` once
        the warm-up calls began. ``StartingKernelFailed`` where the starting kernel crashed,
        hung, could not load or failed a call in the warm-up; ``TaskError`` or
        ``SandboxError`` where the task or the runner failed."""
        outcome = self.start_up_reply(limit_s, run_limit.seconds)
        if isinstance(outcome, Replied) and outcome.message.get("type") == "ready":
            self.ready = outcome.message
            self.ready_s = time.perf_counter() - self.started
            return self.ready
        self.kill()
        if isinstance(outcome, Crashed):
            raise start_failed(start, Status.RUNTIME_ERROR, crash_message(outcome, WARM_UP))
        if isinstance(outcome, TimedOut):
            raise start_failed(start, Status.TIMEOUT,
                               timeout_message(outcome, WARM_UP, run_limit.describe())
                               if self.warming else _start_up_timeout(outcome))
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
    text = (f"its runner did not start within the start-up limit of {outcome.limit_s:.4g} s "
            f"(loading the task and the starting kernel, before its warm-up calls), and the "
            f"sandbox was killed")
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
