"""The worker pool of a knob study: trials built in the calling process, evaluated on the GPUs.

``TrialPool`` keeps up to ``slots`` trials in flight (two per worker by default). A slot is a thread that judges one trial
with the search's ``Driver``: its ports are the caller's tracker and a ``DispatchedEvaluator``
with the slot's own compiler (compilers are subprocesses, so threads overlap them; a build that
fails never reaches a worker) over the study's lane of an ``EvalPool`` (pool.py), which gives
each candidate to a free ``EvalWorker`` (one per GPU, num_gpus=1). The pool is the study's own,
or one shared with other searches (a sweep's), whose workers it then shares fairly. Building
here costs no actor process per slot; on a cluster of several machines a worker elsewhere
builds again into its own node's cache. The caller asks Optuna for settings, records the
verdicts and tells them: this module knows nothing of Optuna.
"""

from __future__ import annotations

import concurrent.futures
import queue
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import ray

from kernelswarm.search import Candidate, Driver, Evaluation, Evaluator, Judged, TrackerPort

from .pool import EvalPool
from .ports import DispatchedEvaluator

STUDY_CELL = "study"


@dataclass(frozen=True)
class Finished:
    """A trial the pool has a verdict for; ``key`` is what the caller submitted it under."""

    key: Hashable
    candidate: Candidate
    judged: Judged

    @property
    def evaluation(self) -> Evaluation:
        return self.judged.evaluation


class TrialPool:
    """``workers`` evaluation workers behind one dispatcher, fed by ``slots`` build threads;
    with ``pool``, that pool's workers instead (opened as cell ``cell``; the pool outlives the
    study and is closed by its owner).

    ``tracker`` serves claims and recorded verdicts (a candidate recorded before, or built to a
    binary judged before, is not evaluated again); the caller records. Used from one thread. ``submit`` needs a free slot (``has_room``); ``wait``
    returns the trials that finished, in the order they finished. An exception of the
    evaluation (e.g. ``StartingKernelFailed``: the starting kernel fails its own task) is raised
    by ``wait``.
    """

    def __init__(self, make_evaluator: Callable[[], Evaluator], workers: int,
                 worker_resources: dict[str, float], tracker: TrackerPort,
                 slots: int | None = None, pool: EvalPool | None = None,
                 cell: str = STUDY_CELL) -> None:
        self._own_pool = pool is None
        self.pool = EvalPool(workers, worker_resources) if pool is None else pool
        self.lane = self.pool.open(cell, make_evaluator)
        # two trials a worker: one is built (a compiler process on this machine's CPUs) while
        # the other is judged, so a GPU does not wait for the next trial's build
        self.slots = slots or 2 * self.pool.size
        self._tracker = tracker
        self._make_compiler = make_evaluator
        self._compilers: queue.SimpleQueue[Evaluator] = queue.SimpleQueue()
        self._threads = concurrent.futures.ThreadPoolExecutor(self.slots, "trial-build")
        self._pending: dict[concurrent.futures.Future[Judged], tuple[Hashable, Candidate]] = {}

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    @property
    def has_room(self) -> bool:
        return len(self._pending) < self.slots

    def submit(self, key: Hashable, candidate: Candidate) -> None:
        if not self.has_room:
            raise RuntimeError("TrialPool.submit with every slot busy; check has_room first")
        self._pending[self._threads.submit(self._judge, candidate)] = (key, candidate)

    def _judge(self, candidate: Candidate) -> Judged:
        try:  # a compiler is used by one thread at a time (the Evaluator contract)
            compiler = self._compilers.get_nowait()
        except queue.Empty:
            compiler = self._make_compiler()
        try:
            return Driver(self._tracker, DispatchedEvaluator(compiler, self.lane)).judge(
                candidate)
        finally:
            self._compilers.put(compiler)

    def wait(self, timeout: float) -> list[Finished]:
        """The trials finished within ``timeout`` seconds (an empty list if none)."""
        if not self._pending:
            return []
        done, _ = concurrent.futures.wait(self._pending, timeout=timeout,
                                          return_when=concurrent.futures.FIRST_COMPLETED)
        finished = []
        for future in done:
            key, candidate = self._pending.pop(future)
            finished.append(Finished(key, candidate, future.result()))
        return finished

    def utilisation(self) -> dict[str, float]:
        return self.lane.utilisation()

    def activity(self) -> dict[str, Any] | None:
        """What the pool's workers did and when (``EvalPool.activity``; None if unknown)."""
        return self.pool.activity()

    def close(self) -> None:
        """Release the sandboxes and, when the pool is the study's own, the actors. Trials
        still in flight are abandoned: an own pool's workers are killed (a sandbox exits when
        its worker does); on a shared pool their verdicts are dropped."""
        if self._own_pool:
            self.pool.close(wait=not self._pending)
        else:
            try:
                self.pool.release(self.lane.cell)
            except ray.exceptions.RayError:  # a shared pool closed by its owner already
                pass
        self._pending.clear()
        self._threads.shutdown(wait=False, cancel_futures=True)
        while not self._compilers.empty():
            self._compilers.get_nowait().close()
