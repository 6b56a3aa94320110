"""A lineage as a Ray actor: the agent loop, compiling on its own CPU before asking for a GPU."""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import ray

from kernelswarm.search import (
    Budget,
    Candidate,
    Evaluation,
    Evaluator,
    KnobTuner,
    Lineage,
    Roles,
    journal_storage,
)

# How long a lineage waits for another's verdict on the same kernel before evaluating it itself
# (the other may have died); long enough for a compile plus a queued evaluation.
CLAIM_WAIT_S = 600.0


@dataclass(frozen=True)
class LineageResult:
    lineage: int
    steps: int
    stop_reason: str
    best_speedup: float
    error: str = ""  # a traceback when the lineage itself crashed


@ray.remote(num_cpus=0, max_concurrency=2)
class LineageRunner:
    """Runs one lineage until its budget or planner stops it, or ``stop`` is called.

    Compiling here (the compile pool is the lineage actors' CPUs) means an evaluation worker
    only ever receives candidates that built, and never waits for a compiler.
    """

    def __init__(self, lineage: int, seed: int, start: Candidate, start_eval: Evaluation,
                 make_roles: Callable[[int], Roles], make_compiler: Callable[[], Evaluator],
                 budget: Budget, tracker: ray.actor.ActorHandle,
                 dispatcher: ray.actor.ActorHandle, tuner_journal: Path | None,
                 history: list[tuple[Candidate, Evaluation]] | None = None,
                 max_repairs: int = 2) -> None:
        self._stop = threading.Event()
        storage = journal_storage(tuner_journal) if tuner_journal else None
        tuner = KnobTuner(seed=seed, storage=storage, prefix=f"lineage{lineage}-")
        self._lineage = Lineage(lineage, start, start_eval, make_roles(seed), tuner, budget,
                                max_repairs=max_repairs)
        for candidate, evaluation in history or ():  # a resumed run: pick up where it stopped
            self._lineage.replay(candidate, evaluation)
        self._compiler = make_compiler()
        self._tracker = tracker
        self._dispatcher = dispatcher

    def stop(self) -> None:
        self._stop.set()

    def _evaluate(self, candidate: Candidate) -> tuple[Evaluation, float]:
        """The verdict and the worker seconds it cost (0 when a recorded verdict is reused)."""
        known, mine = ray.get(self._tracker.claim.remote(candidate.id))
        if known is not None:
            return known, 0.0
        if not mine:  # another lineage is evaluating this very kernel: take its verdict
            deadline = time.monotonic() + CLAIM_WAIT_S
            while time.monotonic() < deadline and not self._stop.is_set():
                time.sleep(0.25)
                if (known := ray.get(self._tracker.lookup.remote(candidate.id))) is not None:
                    return known, 0.0
        try:
            built = self._compiler.compile(candidate)
            if not built.ok:
                return built.as_evaluation(), 0.0
            reused = ray.get(self._tracker.lookup_binary.remote(candidate.id, built.binary))
            if reused is not None:
                return reused, 0.0
            evaluation = ray.get(self._dispatcher.evaluate.remote(candidate))
            return evaluation, evaluation.eval_s
        except BaseException:
            self._tracker.release.remote(candidate.id)
            raise

    def run(self) -> LineageResult:
        lineage = self._lineage
        try:
            while not self._stop.is_set():
                migrants = ray.get(self._tracker.migrants.remote(lineage.lineage, lineage.step))
                if migrants:
                    lineage.receive(migrants)
                candidate = lineage.propose()
                if candidate is None:
                    break
                evaluation, worker_s = self._evaluate(candidate)
                lineage.observe(candidate, evaluation, worker_s)
                ray.get(self._tracker.record.remote(lineage.lineage, lineage.step, candidate,
                                                    evaluation))
        except Exception:
            return LineageResult(lineage.lineage, lineage.step, "crashed", lineage.best_speedup,
                                 traceback.format_exc())
        finally:
            self._compiler.close()
        reason = "stopped by the driver" if self._stop.is_set() else lineage.stop_reason or ""
        return LineageResult(lineage.lineage, lineage.step, reason, lineage.best_speedup)
