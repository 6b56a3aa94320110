"""``LocalExecutor``: a whole search in one process (tests, laptops).

It steps lineages with the same ``Driver`` the Ray actors of ``kernelswarm.cluster`` run, with
the in-process ``Tracker`` and ``Evaluator`` as its ports.
"""

from __future__ import annotations

from collections.abc import Callable

from .driver import Clock, Driver
from .evaluator import Evaluator
from .lineage import Lineage
from .sink import RunSummary
from .tracker import Tracker


class LocalExecutor:
    """Round-robin over lineages in the calling thread until all have stopped."""

    def __init__(self, evaluator: Evaluator, tracker: Tracker,
                 on_step: Callable[[Lineage], None] | None = None,
                 clock: Clock | None = None) -> None:
        self.evaluator = evaluator
        self.tracker = tracker
        self.on_step = on_step
        self.driver = Driver(tracker, evaluator, clock=clock)

    def run(self, lineages: list[Lineage]) -> RunSummary:
        """Step every lineage in turn until each has stopped; close the tracker."""
        active = list(lineages)
        while active:
            for lineage in list(active):
                if not self.driver.step(lineage):
                    active.remove(lineage)
                elif self.on_step:
                    self.on_step(lineage)
        reasons = sorted({lin.stop_reason or "" for lin in lineages})
        return self.tracker.close("; ".join(r for r in reasons if r) or "all lineages stopped")
