"""One candidate's runner, as the judge sees it: requests with a deadline, hostile replies.

Every reply is validated field by field (``field``): a missing or ill-typed field, or a value out
of range, is ``CandidateFault`` RUNTIME_ERROR "malformed reply". Once the candidate is loaded the
runner is the candidate's, so a ``fault`` reply is the candidate's too (a forged one can only
fail the candidate itself). A dead runner or one past the deadline stops the trial
(``Stopped``), which the evaluator turns into RUNTIME_ERROR or TIMEOUT naming where it was.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ...search import ShapeResult, Status
from .runner_process import Crashed, Replied, RunnerProcess, TimedOut, fault_text, raise_fault

_TEXT_LIMIT = 2000


class CandidateFault(Exception):
    """A verdict against the candidate, raised where it is found."""

    def __init__(self, status: Status, message: str,
                 shapes: Sequence[ShapeResult] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.shapes = tuple(shapes)


class Stopped(Exception):
    """The runner died or ran past the deadline; ``where`` is what it was doing."""

    def __init__(self, outcome: Crashed | TimedOut, where: str, shape: str) -> None:
        super().__init__(where)
        self.outcome = outcome
        self.where = where
        self.shape = shape


def malformed(what: str, shape: str = "") -> CandidateFault:
    return CandidateFault(Status.RUNTIME_ERROR,
                          f"malformed reply from the runner: {what} (was the channel written by "
                          f"the kernel?)", [ShapeResult(shape=shape)] if shape else [])


def field(reply: Mapping[str, Any], name: str, kind: type | tuple[type, ...], *,
          within: tuple[float | None, float | None] = (None, None),
          optional: bool = False) -> Any:
    """``reply[name]``, checked: of ``kind`` (bool is never an int), finite, within the bounds
    ``within`` (low, high; ``None`` for no bound)."""
    if name not in reply or reply[name] is None:
        if optional:
            return None
        raise malformed(f"field {name!r} is missing")
    value = reply[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
        raise malformed(f"field {name!r} is a bool")
    if not isinstance(value, kinds):
        raise malformed(f"field {name!r} is a {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise malformed(f"field {name!r} is {value}")
    low, high = within
    if low is not None and value < low or high is not None and value > high:
        raise malformed(f"field {name!r}={value!r} is out of range")
    if isinstance(value, str):
        return value[:_TEXT_LIMIT]
    return value


class Trial:
    """A runner serving one candidate, with the run phase's time limit: ``timeout_s`` of
    waiting for the runner in all (the judge's own references and comparisons not counted)."""

    def __init__(self, runner: RunnerProcess, timeout_s: float, trusted: bool = False) -> None:
        self.runner = runner
        self.timeout_s = timeout_s
        self.spent_s = 0.0  # time spent waiting for the runner: the judge's own work is free
        self.trusted = trusted  # no candidate code in it (the calibration runner)
        self.where = "before the first shape"
        self.shape = ""
        # seconds waited on the runner, per request ("call", "time.batch", ...): with the
        # phases, where an evaluation's time went (Evaluation.cost.request_s)
        self.request_s: dict[str, float] = {}

    def at(self, where: str, shape: str = "") -> None:
        self.where, self.shape = where, shape

    def ask(self, message: dict[str, Any], expect: str) -> dict[str, Any]:
        """Send ``message``; the reply of type ``expect``, or ``called`` (an observation)."""
        began = time.monotonic()
        outcome = self.runner.request(message, self.timeout_s - self.spent_s)
        waited = time.monotonic() - began
        self.spent_s += waited
        kind = str(message.get("type")) + (f".{message['step']}" if "step" in message else "")
        self.request_s[kind] = self.request_s.get(kind, 0.0) + waited
        if isinstance(outcome, (Crashed, TimedOut)):
            if isinstance(outcome, TimedOut):
                outcome = TimedOut(self.timeout_s, outcome.log_tail)
            raise Stopped(outcome, self.where, self.shape)
        assert isinstance(outcome, Replied)
        reply = outcome.message
        kind = reply.get("type")
        if kind == "fault":
            if self.trusted:
                raise_fault(reply, "the runner failed before any candidate code ran")
            text = fault_text(reply)[:_TEXT_LIMIT]
            raise CandidateFault(Status.RUNTIME_ERROR, f"the runner failed {self.where}:\n{text}",
                                 [ShapeResult(shape=self.shape)] if self.shape else [])
        if kind not in (expect, "called"):
            raise malformed(f"a {kind!r} frame where {expect!r} was expected", self.shape)
        return reply

    def call_problem(self, reply: Mapping[str, Any], where: str, shape: str) -> None:
        """Raise the verdict a ``called`` reply carries (an error or an integrity finding)."""
        shapes = [ShapeResult(shape=shape)]
        error = field(reply, "error", str, optional=True)
        if error is not None:
            cuda = field(reply, "cuda", str, optional=True)
            if cuda is not None:
                raise CandidateFault(Status.RUNTIME_ERROR, cuda.replace("{where}", where),
                                     shapes)
            text = field(reply, "message", str, optional=True) or ""
            if error == "LoadError":
                raise CandidateFault(Status.RUNTIME_ERROR, text)
            raise CandidateFault(Status.RUNTIME_ERROR,
                                 f"calling the kernel raised {error}: {text} {where}", shapes)
        problem = field(reply, "problem", str, optional=True)
        if problem is not None:
            raise CandidateFault(Status.REJECTED, f"{where}, the kernel {problem}", shapes)
