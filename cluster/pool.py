"""One pool of evaluation workers for everything a driver runs: every cell of a sweep, a run's
search, or a knob study's trials.

``EvalPool`` starts the workers (one per GPU, ``num_gpus=1``; on CPU the configured count) and
their ``EvalDispatcher`` once. Each search opens a *cell* on it with the factory of its
evaluator (task, language, settings) and gets a ``Lane``: what its lineages or trial slots
evaluate through. Workers build a cell's evaluator on its first candidate and keep it until the
cell is released, so cells of different tasks and languages share the same GPUs; the dispatcher
hands free workers to cells in turn (fair_share.py), each under its optional cap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import RayError

from kernelswarm.search import (
    BudgetExpired,
    Candidate,
    Evaluation,
    Evaluator,
    Screen,
    StartingKernelFailed,
)

from .eval_worker import EvalDispatcher, EvalWorker
from .fair_share import UnknownCell
from .packed import PackedFactory
from .retry import call

# How long closing waits for workers to release their sandboxes before they are killed.
CLOSE_WAIT_S = 60.0


def verdict(ref: ray.ObjectRef) -> Evaluation:
    """``ray.get`` of an evaluation; a task whose starting kernel fails raises
    ``StartingKernelFailed`` itself, its message the verdict's (Ray's wrapper would print the
    workers' tracebacks)."""
    try:
        return ray.get(ref)
    except StartingKernelFailed as failed:
        raise StartingKernelFailed(failed.evaluation) from None


@dataclass(frozen=True)
class Lane:
    """A cell's way into a pool (picklable: it travels to lineage actors)."""

    dispatcher: ray.actor.ActorHandle
    cell: str
    # What opened the cell, packed (a lineage actor unpickling its lane imports nothing for
    # it): a dispatcher restarted by Ray knows no cells, so the lane opens its own again
    # before sending the candidate again.
    factory: PackedFactory[Evaluator] | None = None
    max_workers: int | None = None
    group: str | None = None

    def submit(self, candidate: Candidate, seeds: tuple[int, ...] = ()) -> ray.ObjectRef:
        """Queue ``candidate`` for a worker; the reference resolves to its ``Evaluation``.
        ``seeds``: check its correctness on these (``Evaluator.evaluate_on``: a
        confirmation's secret seeds) instead of the evaluator's own."""
        return self.dispatcher.evaluate.remote(self.cell, candidate, seeds)

    def evaluate(self, candidate: Candidate, seeds: tuple[int, ...] = (),
                 screen: Screen | None = None, not_after: float | None = None) -> Evaluation:
        """``candidate``'s verdict (on ``seeds`` as ``submit`` says; screened by ``screen``
        where given, ``Evaluator.evaluate_screened``); survives a restart of the dispatcher
        (its process lost). ``not_after`` (Unix time): ``BudgetExpired`` if no worker has
        taken it by then."""
        try:
            return call(self.dispatcher.evaluate, self.cell, candidate, seeds, screen,
                        not_after, on_retry=self._reopen)
        except UnknownCell:  # the dispatcher restarted between two calls of this lane
            if self.factory is None:
                raise
            self._reopen()
            return call(self.dispatcher.evaluate, self.cell, candidate, seeds, screen,
                        not_after, on_retry=self._reopen)
        except StartingKernelFailed as failed:  # without Ray's wrapper (see ``verdict``)
            raise StartingKernelFailed(failed.evaluation) from None
        except BudgetExpired as expired:  # without Ray's wrapper: its message alone
            raise BudgetExpired(str(getattr(expired, "cause", None) or expired)) from None

    def _reopen(self) -> None:
        if self.factory is not None:
            ray.get(self.dispatcher.open_cell.remote(self.cell, self.factory, self.max_workers,
                                                     self.group))

    def utilisation(self) -> dict[str, float]:
        """The pool's busy fraction and this cell's worker seconds (``cell_busy_s``)."""
        return call(self.dispatcher.utilisation, self.cell, on_retry=self._reopen)


class EvalPool:
    """``workers`` evaluation workers (each started with ``worker_resources``) behind one
    dispatcher. ``open`` a cell per search, ``release`` it when the search is over, ``close``
    the pool once nothing uses it. Idle workers build the evaluators of open cells ahead of their
    first candidates (eval_worker.py)."""

    def __init__(self, workers: int, worker_resources: dict[str, float]) -> None:
        if workers < 1:
            raise ValueError(f"an evaluation pool needs at least one worker, got {workers}")
        self.workers = [EvalWorker.options(**worker_resources).remote() for _ in range(workers)]
        self.dispatcher = EvalDispatcher.remote(self.workers)
        self.size = workers
        self.closed = False

    def open(self, cell: str, make_evaluator: Callable[[], Evaluator],
             max_workers: int | None = None, group: str | None = None) -> Lane:
        """Admit a cell whose candidates ``make_evaluator()`` judges; ``max_workers`` caps the
        workers it (with the other cells of ``group``) may hold at once (None: any free one)."""
        factory = PackedFactory.of(make_evaluator)
        ray.get(self.dispatcher.open_cell.remote(cell, factory, max_workers, group))
        return Lane(self.dispatcher, cell, factory, max_workers, group)

    def release(self, cell: str) -> None:
        """Close the cell's evaluators on every worker (their sandboxes go)."""
        ray.get(self.dispatcher.release_cell.remote(cell))

    def utilisation(self, cell: str | None = None) -> dict[str, float]:
        return ray.get(self.dispatcher.utilisation.remote(cell))

    def activity(self) -> dict[str, Any] | None:
        """What each worker did and when, and where it runs (``EvalDispatcher.activity``;
        activity.py reads busy fractions from it); None when the dispatcher cannot answer
        (figures about the workers only: a search's results stand without them)."""
        try:
            return ray.get(self.dispatcher.activity.remote(), timeout=CLOSE_WAIT_S)
        except RayError:
            return None

    def close(self, wait: bool = True) -> None:
        """Release every sandbox and the actors; ``wait=False`` kills the workers at once
        (evaluations in flight are abandoned: a sandbox exits when its worker does)."""
        if self.closed:
            return
        self.closed = True
        if wait:
            try:
                ray.get(self.dispatcher.close.remote(), timeout=CLOSE_WAIT_S)
            except RayError:  # a timeout included: killed below either way
                pass
        for actor in [*self.workers, self.dispatcher]:
            ray.kill(actor, no_restart=True)
