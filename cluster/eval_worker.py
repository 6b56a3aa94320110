"""Evaluation workers (one per GPU, or per timing slot on CPU) and the dispatcher feeding them.

One pool of workers can serve several searches at once (the cells of a sweep): each candidate
comes with its cell's name, a worker keeps one evaluator per evaluator factory (task, language
and settings; cells whose factories are alike share it, and so its calibration), and the
dispatcher shares the workers fairly between the cells (fair_share.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections import Counter
from collections.abc import Callable

import ray
from ray.exceptions import ActorUnavailableError, RayActorError, RayTaskError

from kernelswarm.search import Candidate, Evaluation, Evaluator, Status

from .fair_share import FairShare, Share, UnknownCell

RESTART_WAIT_S = 300.0
# How long a worker whose evaluation raised is given to finish going down, before the
# dispatcher asks whether it is still the same process (see EvalDispatcher._went_down).
EXIT_GRACE_S = 1.0


def evaluator_key(make_evaluator: Callable[[], Evaluator]) -> str:
    """What a worker keys its evaluators by: factories that pickle to the same bytes (the same
    task, language and settings) build the same evaluator, so cells share one per worker and
    calibrate once (the baselines and the starting kernel timed once, not once per cell)."""
    return hashlib.sha256(ray.cloudpickle.dumps(make_evaluator)).hexdigest()[:16]


@ray.remote(max_restarts=-1, max_task_retries=0)
class EvalWorker:
    """Judges candidates on its device, one at a time (it times exclusively).

    Holds one evaluator (and so one sandbox process) per evaluator key it has judged a
    candidate of, built from the factory on the first one and kept until ``release``: an
    evaluator calibrates once (baselines, starting kernel) and keeps a warm spare runner.
    """

    def __init__(self) -> None:
        self._evaluators: dict[str, Evaluator] = {}
        from kernelswarm.evaluators.judge.runner_process import start_runner_template

        # its imports overlap the other actors' start
        start_runner_template("cuda" if ray.get_gpu_ids() else "cpu")

    def evaluate(self, key: str, candidate: Candidate,
                 make_evaluator: Callable[[], Evaluator] | None = None) -> Evaluation | None:
        """The verdict; None when this worker holds no evaluator for ``key`` and was not given
        its factory (it was restarted since, say): the caller sends the factory with it."""
        evaluator = self._evaluators.get(key)
        if evaluator is None:
            if make_evaluator is None:
                return None
            evaluator = self._evaluators[key] = make_evaluator()
        return evaluator.evaluate(candidate)

    def pid(self) -> int:
        """This incarnation's process id: a restarted worker answers with another."""
        return os.getpid()

    def release(self, key: str) -> None:
        """Close the key's evaluator (its spare runner); nothing if it never judged one."""
        evaluator = self._evaluators.pop(key, None)
        if evaluator is not None:
            evaluator.close()

    def close(self) -> None:
        for key in list(self._evaluators):
            self.release(key)


# Restarted by Ray when its process is lost (its node removed, say): it comes back with its
# workers and no cells; each Lane opens its cell again and sends its candidate again.
@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)
class EvalDispatcher:
    """Hands each evaluation to a free worker, so no GPU idles while a cell has a queue.

    Cells are opened with their evaluator factory (and optionally a cap on the workers they
    hold at once); a free worker goes to the next cell in turn with work (``FairShare``).
    A worker that dies mid-evaluation is restarted by Ray; the candidate is retried once on the
    next free worker, and a second death becomes a ``RUNTIME_ERROR`` verdict for it. A worker
    being killed can answer before it is gone: Ray kills a dying worker's child processes (the
    sandbox) first, and the evaluation then fails with the sandbox's error. An evaluation that
    raised counts as a death when its worker turns out to be gone or another process since.
    """

    def __init__(self, workers: list[ray.actor.ActorHandle]) -> None:
        self._workers = workers
        self._free = list(workers)
        self._share = FairShare()
        self._factories: dict[str, tuple[str, ray.ObjectRef]] = {}  # cell -> (key, factory)
        # (worker, key) pairs whose factory the worker was given: the factory is sent with a
        # worker's first candidate of a key only (each call that carries it costs the worker
        # fetching and unpickling it); a worker that lost it asks again.
        self._given: set[tuple[int, str]] = set()
        self._pids: dict[int, int] = {}  # id(worker) -> the process it had when last asked
        self._busy_s: Counter[str] = Counter()
        self._evaluations: Counter[str] = Counter()
        self._started = time.monotonic()
        self._deaths = 0

    async def open_cell(self, cell: str, make_evaluator: Callable[[], Evaluator],
                        max_workers: int | None = None, group: str | None = None) -> None:
        """Admit a cell (in ``group``, see ``Share``); its factory is stored once and handed to
        each worker by reference."""
        self._share.add(Share(cell, max_workers, group))
        self._factories[cell] = (evaluator_key(make_evaluator), ray.put(make_evaluator))

    async def release_cell(self, cell: str) -> None:
        """Forget a cell and close its evaluators on every worker (unless another open cell
        shares them); candidates of it still waiting for a worker are refused."""
        for ticket in self._share.remove(cell):
            if not ticket.done():
                ticket.set_exception(UnknownCell(f"cell {cell!r} was released"))
        key, _ = self._factories.pop(cell, ("", None))
        if key and all(other != key for other, _ in self._factories.values()):
            self._given = {given for given in self._given if given[1] != key}
            await asyncio.gather(*(w.release.remote(key) for w in self._workers),
                                 return_exceptions=True)

    async def _acquire(self, cell: str) -> ray.actor.ActorHandle:
        ticket = asyncio.get_running_loop().create_future()
        self._share.wait(cell, ticket)
        self._match()
        try:
            return await ticket
        except asyncio.CancelledError:
            self._share.cancel(cell, ticket)
            if ticket.done() and not ticket.cancelled() and ticket.exception() is None:
                self._give_back(cell, ticket.result())  # granted as the caller went away
            raise

    def _match(self) -> None:
        """Give free workers to waiting cells, in their turns."""
        while self._free:
            turn = self._share.next()
            if turn is None:
                return
            cell, ticket = turn
            if ticket.done():  # its caller went away
                self._share.done(cell)
                continue
            ticket.set_result(self._free.pop(0))

    def _give_back(self, cell: str, worker: ray.actor.ActorHandle) -> None:
        self._free.append(worker)
        self._share.done(cell)
        self._match()

    async def evaluate(self, cell: str, candidate: Candidate) -> Evaluation:
        if cell not in self._factories:
            raise UnknownCell(f"no cell {cell!r} in this evaluation pool; open_cell first")
        key, make = self._factories[cell]
        error = None
        for _ in range(2):
            worker = await self._acquire(cell)
            began = time.monotonic()
            try:
                evaluation = await self._judge(worker, key, make, candidate)
                self._evaluations[cell] += 1
                return evaluation
            except (RayActorError, ActorUnavailableError) as exc:
                error = exc
                await self._died(worker)
            except RayTaskError as exc:  # raised by the evaluator, inside the worker
                if not await self._went_down(worker):
                    raise
                error = exc
                await self._died(worker)
            finally:
                self._busy_s[cell] += time.monotonic() - began
                self._give_back(cell, worker)
        return Evaluation(candidate.id, Status.RUNTIME_ERROR,
                          f"the evaluation worker died twice while evaluating this candidate "
                          f"(its process was lost, e.g. killed or out of memory): {error}")

    async def _judge(self, worker: ray.actor.ActorHandle, key: str, make: ray.ObjectRef,
                     candidate: Candidate) -> Evaluation:
        """``candidate``'s verdict from ``worker``, with the factory only if it may lack it."""
        if id(worker) not in self._pids:
            self._pids[id(worker)] = await worker.pid.remote()
        given = (id(worker), key)
        evaluation = None
        if given in self._given:
            evaluation = await worker.evaluate.remote(key, candidate)
        if evaluation is None:
            evaluation = await worker.evaluate.remote(key, candidate, make)
            self._given.add(given)
        return evaluation

    async def _went_down(self, worker: ray.actor.ActorHandle) -> bool:
        """Whether ``worker`` died after its evaluation raised (it is gone, restarting, or a
        new process), given ``EXIT_GRACE_S`` to finish exiting first."""
        await asyncio.sleep(EXIT_GRACE_S)
        try:
            pid = await worker.pid.remote()
        except (RayActorError, ActorUnavailableError):
            return True
        return pid != self._pids.get(id(worker))

    async def _died(self, worker: ray.actor.ActorHandle) -> None:
        self._deaths += 1
        self._pids.pop(id(worker), None)
        await self._restarted(worker)

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

    async def utilisation(self, cell: str | None = None) -> dict[str, float]:
        """The pool's busy fraction and worker deaths; with ``cell``, also that cell's worker
        seconds, evaluations and how many workers it holds and candidates it has waiting."""
        elapsed = max(time.monotonic() - self._started, 1e-9)
        out = {"busy_fraction": sum(self._busy_s.values()) / (elapsed * len(self._workers)),
               "worker_deaths": float(self._deaths), "workers": float(len(self._workers))}
        if cell is not None:
            out.update({"cell_busy_s": self._busy_s[cell],
                        "cell_evaluations": float(self._evaluations[cell]),
                        "cell_holding": float(self._share.holding(cell)),
                        "cell_waiting": float(self._share.waiting(cell))})
        return out

    async def close(self) -> None:
        await asyncio.gather(*(w.close.remote() for w in self._workers), return_exceptions=True)
