"""The drive loop of the search, written once: claim → build → reuse → evaluate → observe → record.

``Driver`` runs against small ports, so the same code serves every caller: ``LocalExecutor``
passes the in-process ``Tracker`` and ``Evaluator``; the Ray actors of ``kernelswarm.cluster``
pass adapters that forward each call to an actor; ``kernelswarm tune`` judges its trials with it.

- ``TrackerPort``: claims, recorded verdicts, migrants, novelty, records. ``search.Tracker`` is
  one.
- ``Evaluator`` (``search.evaluator``): ``compile`` where the driver runs, ``evaluate`` wherever
  the workers are.
- ``Clock``: monotonic time and sleep, so waiting for another lineage's claim is testable
  without real sleeps.
- ``StopSignal``: asks a running lineage to stop after its current step.

An evaluator may raise ``BudgetExpired`` for a candidate whose verdict would come after the
lineage's wall-time budget (built after it, or waiting for a worker then): the claim is
released, nothing is recorded, and the lineage stops with that message.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from .archive import Member
from .budget import BudgetExpired
from .candidate import Candidate
from .evaluation import Evaluation, Status
from .evaluator import Evaluator
from .lineage import Lineage
from .screening import Screen
from .strategies import Rejection

# How long a lineage waits for another's verdict on the same kernel before evaluating it itself
# (the other may have died); long enough for a compile plus a queued evaluation.
CLAIM_WAIT_S = 600.0
CLAIM_POLL_S = 0.25
STOPPED = "stopped by the driver"


class TrackerPort(Protocol):
    """What the driver needs of the tracker.

    Contract: safe to call from several drivers at once (one total order of records); ``claim``
    reserves an id until ``record`` or ``release``; ``record`` returns once durable sinks hold
    the record (its return value is not used); a verdict returned by ``lookup_binary`` is
    already re-issued under the asking candidate's id.
    """

    def claim(self, candidate_id: str) -> tuple[Evaluation | None, bool]:
        """(known verdict, False); (None, True): evaluate it; (None, False): another is."""
        ...

    def release(self, candidate_id: str) -> None:
        """Give up a claim without recording."""
        ...

    def lookup(self, candidate_id: str) -> Evaluation | None:
        """The verdict recorded for this id, if any."""
        ...

    def lookup_binary(self, candidate_id: str, binary: str) -> Evaluation | None:
        """The verdict of an earlier candidate with the same compiled binary, if any."""
        ...

    def record(self, lineage: int, step: int, candidate: Candidate,
               evaluation: Evaluation) -> object:
        """Store one verdict."""
        ...

    def migrants(self, lineage: int, step: int) -> list[Member]:
        """Elites for ``lineage`` at ``step`` (none unless it is a migration step)."""
        ...

    def novel(self, candidate: Candidate) -> Rejection | None:
        """Why ``candidate`` is not to be judged (too close to a judged kernel), or None."""
        ...


class Clock(Protocol):
    """Monotonic seconds and sleeping; ``SystemClock`` is the real one."""

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class StopSignal(Protocol):
    """Set once a lineage must stop after its current step (``threading.Event`` is one)."""

    def is_set(self) -> bool: ...


class SystemClock:
    """The process's monotonic clock and ``time.sleep``."""

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class NeverStop:
    """A stop signal never set: the lineage runs until its budget or planner stops it."""

    def is_set(self) -> bool:
        return False


class Via(Enum):
    """How a verdict was reached; only ``EVALUATED`` occupied an evaluation worker."""

    RECORDED = "recorded"  # this id's verdict was recorded before
    WAITED = "waited"  # another lineage was evaluating this id; its verdict
    BUILD_FAILED = "build failed"
    SAME_BINARY = "same binary"  # an earlier candidate built to the same binary; its verdict
    EVALUATED = "evaluated"


@dataclass(frozen=True)
class Judged:
    """A verdict on a candidate, the worker seconds it cost and how it was reached."""

    evaluation: Evaluation
    worker_s: float
    via: Via


class Driver:
    """Judges candidates and steps lineages against a tracker and an evaluator.

    One driver is used by one thread at a time (its evaluator's contract); several drivers may
    share one tracker. A claim is released when judging fails, so no other lineage waits for a
    verdict that will not come.
    """

    def __init__(self, tracker: TrackerPort, evaluator: Evaluator, clock: Clock | None = None,
                 stop: StopSignal | None = None, claim_wait_s: float = CLAIM_WAIT_S,
                 poll_s: float = CLAIM_POLL_S) -> None:
        self.tracker = tracker
        self.evaluator = evaluator
        self.clock = clock or SystemClock()
        self.stop = stop or NeverStop()
        self.claim_wait_s = claim_wait_s
        self.poll_s = poll_s

    def judge(self, candidate: Candidate, screen: Screen | None = None) -> Judged:
        """The verdict on ``candidate``: recorded already, another lineage's on the same id
        (waited for), a failed build, an identical binary's, or a new evaluation (screened by
        ``screen`` where given). A screened-out verdict is reused only where ``screen`` drops
        it too: it was screened against another lineage's bar, or against none (a full
        evaluation is asked for)."""
        known, mine = self.tracker.claim(candidate.id)
        if known is not None and _stands(known, screen):
            return Judged(known, 0.0, Via.RECORDED)
        if known is None and not mine and (theirs := self._wait_for(candidate.id)) is not None \
                and _stands(theirs, screen):
            return Judged(theirs, 0.0, Via.WAITED)
        try:
            return self._build_and_evaluate(candidate, screen)
        except BaseException:
            self.tracker.release(candidate.id)
            raise

    def _wait_for(self, candidate_id: str) -> Evaluation | None:
        """Another lineage's verdict on this id; None if it does not come in time (that lineage
        may have died: the caller evaluates it) or a stop is asked for."""
        deadline = self.clock.monotonic() + self.claim_wait_s
        while self.clock.monotonic() < deadline and not self.stop.is_set():
            self.clock.sleep(self.poll_s)
            if (known := self.tracker.lookup(candidate_id)) is not None:
                return known
        return None

    def _build_and_evaluate(self, candidate: Candidate, screen: Screen | None) -> Judged:
        built = self.evaluator.compile(candidate)
        if not built.ok:  # a failed build costs no worker time
            return Judged(built.as_evaluation(), 0.0, Via.BUILD_FAILED)
        reused = self.tracker.lookup_binary(candidate.id, built.binary)
        if reused is not None and _stands(reused, screen):
            return Judged(reused, 0.0, Via.SAME_BINARY)
        evaluation = (self.evaluator.evaluate(candidate) if screen is None
                      else self.evaluator.evaluate_screened(candidate, screen))
        return Judged(evaluation, evaluation.eval_s, Via.EVALUATED)

    def step(self, lineage: Lineage) -> bool:
        """One plan-code-test-profile step of ``lineage``; False once it has stopped."""
        migrants = self.tracker.migrants(lineage.lineage, lineage.step)
        if migrants:
            lineage.receive(migrants)
        while True:  # a candidate too close to a judged kernel is not judged; the next one is
            candidate = lineage.propose()
            if candidate is None:
                return False
            rejection = self.tracker.novel(candidate)
            if rejection is None:
                break
            lineage.reject(candidate, rejection.message)
        try:
            judged = self.judge(candidate, lineage.screen_for(candidate))
        except BudgetExpired as expired:  # released by judge; the lineage's time is up
            lineage.stop_reason = str(expired)
            return False
        try:
            lineage.observe(candidate, judged.evaluation, judged.worker_s)
            self.tracker.record(lineage.lineage, lineage.step, candidate, judged.evaluation)
        except BaseException:
            self.tracker.release(candidate.id)
            raise
        return True

    def run(self, lineage: Lineage) -> str:
        """Step ``lineage`` until it stops or the stop signal is set; why it stopped."""
        while not self.stop.is_set() and self.step(lineage):
            pass
        return STOPPED if self.stop.is_set() else lineage.stop_reason or ""


def _stands(verdict: Evaluation, screen: Screen | None) -> bool:
    """Whether a recorded verdict serves a caller judging with ``screen``: any verdict but a
    screened-out one, and that one where ``screen`` drops it too."""
    if verdict.status is not Status.SCREENED_OUT:
        return True
    return screen is not None and screen.drops(verdict.shapes)
