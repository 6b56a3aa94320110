"""The worker pool of a knob study: trials built on the driver, evaluated on the GPUs.

``TrialPool`` keeps up to ``slots`` trials in flight. A slot is a driver thread with its own
compiler: it builds the candidate (compilers are subprocesses, so threads overlap them; a build
that fails never reaches a worker) and then hands it to the ``EvalDispatcher``, which gives it
to a free ``EvalWorker`` (one per GPU, num_gpus=1). Building on the driver costs no actor
process per slot; on a cluster of several machines a worker elsewhere builds again into its own
node's cache. The driver asks Optuna for settings and tells it the verdicts: this module knows
nothing of Optuna.
"""

from __future__ import annotations

import concurrent.futures
import queue
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import ray

from kernelswarm.search import Candidate, Evaluation, Evaluator

from .eval_worker import EvalDispatcher, EvalWorker

# How long closing waits for workers to release their sandboxes before they are killed.
CLOSE_WAIT_S = 60.0


@dataclass(frozen=True)
class Finished:
    """A trial the pool has a verdict for; ``key`` is what the caller submitted it under."""

    key: Hashable
    candidate: Candidate
    evaluation: Evaluation


class TrialPool:
    """``workers`` evaluation workers behind one dispatcher, fed by ``slots`` build threads.

    Used from one thread (the driver). ``submit`` needs a free slot (``has_room``); ``wait``
    returns the trials that finished, in the order they finished. An exception of the
    evaluation (e.g. a ``TaskError`` because the starting kernel fails its own task) is raised
    by ``wait``.
    """

    def __init__(self, make_evaluator: Callable[[], Evaluator], workers: int,
                 worker_resources: dict[str, float], slots: int | None = None) -> None:
        self.workers = [EvalWorker.options(**worker_resources).remote(make_evaluator)
                        for _ in range(workers)]
        self.dispatcher = EvalDispatcher.remote(self.workers)
        self.slots = slots or workers
        self._make_compiler = make_evaluator
        self._compilers: queue.SimpleQueue[Evaluator] = queue.SimpleQueue()
        self._threads = concurrent.futures.ThreadPoolExecutor(self.slots, "trial-build")
        self._pending: dict[concurrent.futures.Future, tuple[Hashable, Candidate]] = {}

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    @property
    def has_room(self) -> bool:
        return len(self._pending) < self.slots

    def submit(self, key: Hashable, candidate: Candidate) -> None:
        if not self.has_room:
            raise RuntimeError("TrialPool.submit with every slot busy; check has_room first")
        self._pending[self._threads.submit(self._evaluate, candidate)] = (key, candidate)

    def _evaluate(self, candidate: Candidate) -> Evaluation:
        try:  # a compiler is used by one thread at a time (the Evaluator contract)
            compiler = self._compilers.get_nowait()
        except queue.Empty:
            compiler = self._make_compiler()
        try:
            built = compiler.compile(candidate)
        finally:
            self._compilers.put(compiler)
        if not built.ok:
            return built.as_evaluation()
        return ray.get(self.dispatcher.evaluate.remote(candidate))

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
        return ray.get(self.dispatcher.utilisation.remote())

    def close(self) -> None:
        """Release the sandboxes and the actors. Trials still in flight are abandoned: their
        workers are killed (a sandbox exits when its worker does)."""
        if not self._pending:
            try:
                ray.get(self.dispatcher.close.remote(), timeout=CLOSE_WAIT_S)
            except ray.exceptions.RayError:  # a timeout included: killed below either way
                pass
        self._pending.clear()
        for actor in [*self.workers, self.dispatcher]:
            ray.kill(actor, no_restart=True)
        self._threads.shutdown(wait=False, cancel_futures=True)
        while not self._compilers.empty():
            self._compilers.get_nowait().close()
