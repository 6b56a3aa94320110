"""The Tracker as a Ray actor: the single writer of a run's results."""

from __future__ import annotations

from collections import Counter
from typing import Any

import ray

from kernelswarm.search import (
    Candidate,
    Evaluation,
    Migration,
    Record,
    RunInfo,
    RunSummary,
    Sink,
    Tracker,
)


@ray.remote(num_cpus=0, max_concurrency=1)
class TrackerActor:
    """Wraps ``search.Tracker``; one call at a time, so records keep one total order."""

    def __init__(self, run: RunInfo, sinks: list[Sink], elites: int,
                 history: list[Record] | None = None, migration: Migration | None = None) -> None:
        self._tracker = Tracker(run, sinks, elites=elites, history=history or (),
                                migration=migration)
        self._status = Counter()
        self._lineages: dict[int, dict[str, Any]] = {}
        for record in history or ():
            self._count(record)

    def claim(self, candidate_id: str) -> tuple[Evaluation | None, bool]:
        return self._tracker.claim(candidate_id)

    def release(self, candidate_id: str) -> None:
        self._tracker.release(candidate_id)

    def lookup(self, candidate_id: str) -> Evaluation | None:
        return self._tracker.lookup(candidate_id)

    def lookup_binary(self, candidate_id: str, binary: str) -> Evaluation | None:
        return self._tracker.lookup_binary(candidate_id, binary)

    def migrants(self, lineage: int, step: int) -> list[tuple[Candidate, Evaluation]]:
        return self._tracker.migrants(lineage, step)

    def record(self, lineage: int, step: int, candidate: Candidate, evaluation: Evaluation) -> int:
        record = self._tracker.record(lineage, step, candidate, evaluation)
        self._count(record)
        return record.seq

    def _count(self, record: Record) -> None:
        evaluation = record.evaluation
        self._status[evaluation.status.value] += 1
        self._lineages[record.lineage] = {
            "steps": record.step, "best": record.lineage_best,
            "last_status": evaluation.status.value, "last_move": record.candidate.origin.move,
            "last_speedup": evaluation.speedup}

    def best(self) -> tuple[Candidate, Evaluation] | None:
        return self._tracker.best()

    def elites(self, k: int) -> list[tuple[Candidate, Evaluation]]:
        return self._tracker.elites(k)

    def stats(self) -> dict[str, Any]:
        """A cheap snapshot for progress views."""
        best = self._tracker.best()
        return {"records": len(self._tracker.records), "status": dict(self._status),
                "lineages": dict(self._lineages), "best": best[1].speedup if best else 0.0,
                "diversity": self._tracker.diversity(),
                "sink_errors": list(self._tracker.sink_errors)}

    def close(self, stop_reason: str) -> tuple[RunSummary, list[str], list[str]]:
        """Flush and close the sinks: the summary, sink errors, and where each sink wrote."""
        summary = self._tracker.close(stop_reason)
        return summary, list(self._tracker.sink_errors), self._tracker.locations()
