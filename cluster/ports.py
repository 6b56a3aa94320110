"""The search driver's ports over Ray actor handles: each call is forwarded, nothing is decided
here (``search/driver.py`` holds the drive loop). A tracker call whose actor died is retried
once Ray has restarted the actor."""

from __future__ import annotations

import time
from typing import Any

import ray
from ray.exceptions import RayActorError, RayError

from kernelswarm.search import (
    BudgetExpired,
    Candidate,
    Compiler,
    CompileResult,
    Evaluation,
    Evaluator,
    Member,
    Migration,
    Rejection,
    Screen,
)

from .pool import Lane
from .retry import call


class ActorTracker:
    """A ``search.TrackerPort`` over a ``TrackerActor`` handle (blocking calls).

    ``owner``: the lineage driving through this port. Its claims are remembered until recorded
    or released, and claimed again after the tracker restarted (a restarted tracker knows only
    what was recorded), so other lineages keep waiting for its verdict instead of evaluating the
    same kernel.

    ``pipelined``: ``record`` returns once the record is sent, and the lineage goes on with its
    next step while the tracker makes it durable; the next ``record`` (or ``settle``) first
    waits for that, sending it again if the tracker died meanwhile. One record at most is in
    flight, so a lineage's records stay in step order and what it stops with is durable once
    ``settle`` returns. A lineage's next candidate is a different kernel, so nothing it asks
    meanwhile depends on that record (a verdict reused for an identical binary at most misses
    it, and the candidate is evaluated).
    """

    def __init__(self, handle: ray.actor.ActorHandle, owner: int | None = None,
                 migration: Migration | None = None, pipelined: bool = False,
                 novelty: bool = True) -> None:
        self._handle = handle
        self._owner = owner
        self._held: set[str] = set()
        # The tracker's migration settings, when known: steps that are not migration steps
        # get no migrants without asking (a round trip per candidate saved).
        self._migration = migration
        # Whether the run rejects candidates too close to judged ones; off: no round trip.
        self._novelty = novelty
        self._pipelined = pipelined
        self._in_flight: tuple[ray.ObjectRef, tuple[Any, ...]] | None = None

    def _renew(self) -> None:
        for candidate_id in list(self._held):
            ray.get(self._handle.claim.remote(candidate_id, self._owner))

    def _call(self, method: Any, *args: Any) -> Any:
        return call(method, *args, on_retry=self._renew)

    def claim(self, candidate_id: str) -> tuple[Evaluation | None, bool]:
        known, mine = self._call(self._handle.claim, candidate_id, self._owner)
        if mine:
            self._held.add(candidate_id)
        return known, mine

    def release(self, candidate_id: str) -> None:
        # Waited for, so that a tracker restarting meanwhile gets it too; it is called while an
        # error unwinds, and must not raise another.
        self._held.discard(candidate_id)
        try:
            call(self._handle.release, candidate_id)
        except RayError:  # the tracker is gone for good, and its claims with it
            pass

    def lookup(self, candidate_id: str) -> Evaluation | None:
        return self._call(self._handle.lookup, candidate_id)

    def lookup_binary(self, candidate_id: str, binary: str) -> Evaluation | None:
        return self._call(self._handle.lookup_binary, candidate_id, binary)

    def record(self, lineage: int, step: int, candidate: Candidate,
               evaluation: Evaluation) -> int | None:
        """The record's seq once durable; ``pipelined``: None, once sent (see the class)."""
        self.settle()
        args = (lineage, step, candidate, evaluation)
        if self._pipelined:
            self._in_flight = (self._handle.record.remote(*args), args)
            return None
        seq = self._call(self._handle.record, *args)
        self._held.discard(candidate.id)
        return seq

    def settle(self) -> None:
        """Return once the record in flight (``pipelined``) is durable; it is sent again if the
        tracker died before answering (a tracker records one (lineage, step) once)."""
        if self._in_flight is None:
            return
        sent, args = self._in_flight
        self._in_flight = None
        try:
            ray.get(sent)
        except RayActorError as exc:
            if exc.actor_init_failed:
                raise
            self._call(self._handle.record, *args)
        self._held.discard(args[2].id)

    def migrants(self, lineage: int, step: int) -> list[Member]:
        if self._migration is not None and not self._migration.due(step):
            return []
        return self._call(self._handle.migrants, lineage, step)

    def novel(self, candidate: Candidate) -> Rejection | None:
        if not self._novelty:
            return None
        return self._call(self._handle.novel, candidate)


class DispatchedEvaluator(Evaluator):
    """Builds with a local evaluator (this process's CPU is the compile pool) and evaluates on
    the pool's workers through the cell's ``Lane``, so a worker only receives candidates that
    built."""

    def __init__(self, compiler: Compiler, lane: Lane, not_after: float | None = None) -> None:
        self._compiler = compiler
        self._lane = lane
        self._not_after = not_after  # Unix time of the lineage's deadline, if it has one
        until = getattr(compiler, "until", None)
        if not_after is not None and callable(until):  # a build ahead stops there too
            until(not_after)

    def compile(self, candidate: Candidate) -> CompileResult:
        return self._compiler.compile(candidate)

    def evaluate(self, candidate: Candidate) -> Evaluation:
        self._in_time(candidate)
        return self._lane.evaluate(candidate, not_after=self._not_after)

    def evaluate_screened(self, candidate: Candidate, screen: Screen) -> Evaluation:
        self._in_time(candidate)
        return self._lane.evaluate(candidate, screen=screen, not_after=self._not_after)

    def _in_time(self, candidate: Candidate) -> None:
        """``BudgetExpired`` for a candidate that built after the lineage's deadline."""
        if self._not_after is not None and time.time() >= self._not_after:
            raise BudgetExpired(f"wall-time budget reached: candidate {candidate.id} built "
                                f"after it and was not judged")

    def close(self) -> None:
        self._compiler.close()
