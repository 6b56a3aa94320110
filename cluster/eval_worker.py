"""Evaluation workers (one per GPU, or per timing slot on CPU) and the dispatcher feeding them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import ray
from ray.exceptions import ActorUnavailableError, RayActorError

from kernelswarm.search import Candidate, Evaluation, Evaluator, Status

RESTART_WAIT_S = 300.0


@ray.remote(max_restarts=-1, max_task_retries=0)
class EvalWorker:
    """Owns one evaluator (and so one sandbox process on its device); times exclusively."""

    def __init__(self, make_evaluator: Callable[[], Evaluator]) -> None:
        self._evaluator = make_evaluator()

    def evaluate(self, candidate: Candidate) -> Evaluation:
        return self._evaluator.evaluate(candidate)

    def close(self) -> None:
        self._evaluator.close()


@ray.remote(num_cpus=0)
class EvalDispatcher:
    """Hands each evaluation to a free worker, so no GPU idles while another has a queue.

    A worker that dies mid-evaluation is restarted by Ray; the candidate is retried once on the
    next free worker, and a second death becomes a ``RUNTIME_ERROR`` verdict for it.
    """

    def __init__(self, workers: list[ray.actor.ActorHandle]) -> None:
        self._workers = workers
        self._free: asyncio.Queue | None = None
        self._busy_s = 0.0
        self._started = time.monotonic()
        self._deaths = 0

    def _queue(self) -> asyncio.Queue:
        if self._free is None:  # created on the actor's event loop
            self._free = asyncio.Queue()
            for worker in self._workers:
                self._free.put_nowait(worker)
        return self._free

    async def evaluate(self, candidate: Candidate) -> Evaluation:
        free = self._queue()
        error = None
        for _ in range(2):
            worker = await free.get()
            began = time.monotonic()
            try:
                return await worker.evaluate.remote(candidate)
            except (RayActorError, ActorUnavailableError) as exc:
                self._deaths += 1
                error = exc
                await self._restarted(worker)
            finally:
                self._busy_s += time.monotonic() - began
                free.put_nowait(worker)
        return Evaluation(candidate.id, Status.RUNTIME_ERROR,
                          f"the evaluation worker died twice while evaluating this candidate "
                          f"(its process was lost, e.g. killed or out of memory): {error}")

    @staticmethod
    async def _restarted(worker: ray.actor.ActorHandle) -> None:
        """Wait until Ray has restarted a worker (its sandbox and imports take seconds)."""
        deadline = time.monotonic() + RESTART_WAIT_S
        while time.monotonic() < deadline:
            try:
                await worker.__ray_ready__.remote()
                return
            except ActorUnavailableError:
                await asyncio.sleep(0.5)
            except RayActorError:
                return  # gone for good: the retry reports it

    async def utilisation(self) -> dict[str, float]:
        elapsed = max(time.monotonic() - self._started, 1e-9)
        return {"busy_fraction": self._busy_s / (elapsed * len(self._workers)),
                "worker_deaths": float(self._deaths)}

    async def close(self) -> None:
        await asyncio.gather(*(w.close.remote() for w in self._workers), return_exceptions=True)
