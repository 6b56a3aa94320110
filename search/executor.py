"""Executors drive lineages against an evaluator and a tracker.

``LocalExecutor`` runs a whole search in one process (tests, laptops); ``kernelswarm.cluster``
runs the same loop with lineages, evaluators and the tracker as Ray actors.
"""

from __future__ import annotations

from collections.abc import Callable

from .evaluator import Evaluator
from .lineage import Lineage
from .sink import RunSummary
from .tracker import Tracker


def step_lineage(lineage: Lineage, tracker: Tracker, evaluator: Evaluator) -> bool:
    """One plan-code-test-profile step; False once the lineage has stopped."""
    best = tracker.best()
    candidate = lineage.propose(best)
    if candidate is None:
        return False
    evaluation = tracker.lookup(candidate.id) or evaluator.evaluate(candidate)
    lineage.observe(candidate, evaluation)
    tracker.record(lineage.lineage, lineage.step, candidate, evaluation)
    return True


class LocalExecutor:
    """Round-robin over lineages in the calling thread until all have stopped."""

    def __init__(self, evaluator: Evaluator, tracker: Tracker,
                 on_step: Callable[[Lineage], None] | None = None) -> None:
        self.evaluator = evaluator
        self.tracker = tracker
        self.on_step = on_step

    def run(self, lineages: list[Lineage]) -> RunSummary:
        active = list(lineages)
        while active:
            for lineage in list(active):
                if not step_lineage(lineage, self.tracker, self.evaluator):
                    active.remove(lineage)
                elif self.on_step:
                    self.on_step(lineage)
        reasons = sorted({lin.stop_reason or "" for lin in lineages})
        return self.tracker.close("; ".join(r for r in reasons if r) or "all lineages stopped")
