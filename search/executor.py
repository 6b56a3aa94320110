"""Executors drive lineages against an evaluator and a tracker.

``LocalExecutor`` runs a whole search in one process (tests, laptops); ``kernelswarm.cluster``
runs the same loop with lineages, evaluators and the tracker as Ray actors.
"""

from __future__ import annotations

from collections.abc import Callable

from .candidate import Candidate
from .evaluation import Evaluation
from .evaluator import Evaluator
from .lineage import Lineage
from .sink import RunSummary
from .tracker import Tracker


def step_lineage(lineage: Lineage, tracker: Tracker, evaluator: Evaluator) -> bool:
    """One plan-code-test-profile step; False once the lineage has stopped."""
    migrants = tracker.migrants(lineage.lineage, lineage.step)
    if migrants:
        lineage.receive(migrants)
    candidate = lineage.propose()
    if candidate is None:
        return False
    evaluation, worker_s = evaluate_once(candidate, tracker, evaluator)
    lineage.observe(candidate, evaluation, worker_s)
    tracker.record(lineage.lineage, lineage.step, candidate, evaluation)
    return True


def evaluate_once(candidate: Candidate, tracker: Tracker,
                  evaluator: Evaluator) -> tuple[Evaluation, float]:
    """The verdict on ``candidate`` and the worker seconds it cost: a known id or an identical
    compiled binary reuses the recorded verdict (0 s); a failed build costs no worker time."""
    known = tracker.lookup(candidate.id)
    if known is not None:
        return known, 0.0
    built = evaluator.compile(candidate)
    if not built.ok:
        return built.as_evaluation(), 0.0
    reused = tracker.lookup_binary(candidate.id, built.binary)
    if reused is not None:
        return reused, 0.0
    evaluation = evaluator.evaluate(candidate)
    return evaluation, evaluation.eval_s


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
