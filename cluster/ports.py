"""The search driver's ports over Ray actor handles: each call is forwarded, nothing is decided
here (``search/driver.py`` holds the drive loop)."""

from __future__ import annotations

import ray

from kernelswarm.search import CompileResult, Evaluation, Evaluator
from kernelswarm.search.archive import Member
from kernelswarm.search.candidate import Candidate


class ActorTracker:
    """A ``search.TrackerPort`` over a ``TrackerActor`` handle (blocking calls)."""

    def __init__(self, handle: ray.actor.ActorHandle) -> None:
        self._handle = handle

    def claim(self, candidate_id: str) -> tuple[Evaluation | None, bool]:
        return ray.get(self._handle.claim.remote(candidate_id))

    def release(self, candidate_id: str) -> None:
        # Not waited for: it is called while an error unwinds, and must not raise another.
        self._handle.release.remote(candidate_id)

    def lookup(self, candidate_id: str) -> Evaluation | None:
        return ray.get(self._handle.lookup.remote(candidate_id))

    def lookup_binary(self, candidate_id: str, binary: str) -> Evaluation | None:
        return ray.get(self._handle.lookup_binary.remote(candidate_id, binary))

    def record(self, lineage: int, step: int, candidate: Candidate,
               evaluation: Evaluation) -> int:
        return ray.get(self._handle.record.remote(lineage, step, candidate, evaluation))

    def migrants(self, lineage: int, step: int) -> list[Member]:
        return ray.get(self._handle.migrants.remote(lineage, step))


class DispatchedEvaluator(Evaluator):
    """Builds with a local evaluator (this process's CPU is the compile pool) and evaluates on
    the ``EvalDispatcher``'s workers, so a worker only receives candidates that built."""

    def __init__(self, compiler: Evaluator, dispatcher: ray.actor.ActorHandle) -> None:
        self._compiler = compiler
        self._dispatcher = dispatcher

    def compile(self, candidate: Candidate) -> CompileResult:
        return self._compiler.compile(candidate)

    def evaluate(self, candidate: Candidate) -> Evaluation:
        return ray.get(self._dispatcher.evaluate.remote(candidate))

    def close(self) -> None:
        self._compiler.close()
