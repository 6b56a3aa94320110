"""Evaluation workers (one per GPU, or per timing slot on CPU) and the dispatcher feeding them.

One pool of workers can serve several searches at once (the cells of a sweep): each candidate
comes with its cell's name, a worker keeps one evaluator per evaluator factory (task, language
and settings; cells whose factories are alike share it, and so its calibration), and the
dispatcher shares the workers fairly between the cells (fair_share.py).

A worker with nothing to judge gets ready for what is coming: an idle worker builds the
evaluator of an open cell ahead of the cell's first candidate for it (``Evaluator.prepare``: the
calibration measured or read back, the first sandbox started), instead of a candidate waiting
for it. A cell nobody is ready for yet is prepared by one worker at a time (it calibrates, and
the calibration is kept on disk); once one is ready, every idle worker prepares it, reading the
calibration back. The dispatcher keeps what each worker did and when (``activity``):
evaluations and preparations, with the worker's process and GPU, from which busy fractions over
time are read (activity.py).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections import Counter
from typing import Any

import ray
from ray.exceptions import ActorUnavailableError, RayActorError, RayTaskError

from kernelswarm.search import (
    BudgetExpired,
    Candidate,
    Evaluation,
    Evaluator,
    Screen,
    StartingKernelFailed,
    Status,
)

from .fair_share import FairShare, Share, UnknownCell
from .packed import PackedFactory

RESTART_WAIT_S = 300.0
# How long a worker whose evaluation raised is given to finish going down, before the
# dispatcher asks whether it is still the same process (see EvalDispatcher._went_down).
EXIT_GRACE_S = 1.0


def _gpu_identity(gpu: str) -> tuple[str, str]:
    """The UUID and name the driver gives the GPU Ray calls ``gpu`` (its index on the node, or
    its UUID), read with ``nvidia-smi``; "unknown (why)" for the UUID where it cannot be read.
    Never fatal: the worker still judges."""
    try:
        done = subprocess.run(["nvidia-smi", "-i", gpu, "--query-gpu=uuid,name",
                               "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown ({type(exc).__name__}: {exc})"[:200], ""
    uuid, _, name = done.stdout.strip().partition(",")
    if done.returncode != 0 or not uuid.strip():
        return f"unknown (nvidia-smi: {(done.stderr or done.stdout).strip()[:150]})", ""
    return uuid.strip(), name.strip()


@ray.remote(max_restarts=-1, max_task_retries=0)
class EvalWorker:
    """Judges candidates on its device, one at a time (it times exclusively).

    Holds one evaluator (and so one sandbox process) per evaluator key it has judged a
    candidate of, built from the factory on the first one and kept until ``release``: an
    evaluator calibrates once (baselines, starting kernel) and keeps a warm spare runner.
    """

    def __init__(self) -> None:
        self._evaluators: dict[str, Evaluator] = {}
        from kernelswarm.evaluators import start_runner_template

        # its imports overlap the other actors' start
        start_runner_template("cuda" if ray.get_gpu_ids() else "cpu")

    def evaluate(self, key: str, candidate: Candidate, factory: PackedFactory | None = None,
                 seeds: tuple[int, ...] = (), screen: Screen | None = None) -> Evaluation | None:
        """The verdict, checked on ``seeds`` where given (``Evaluator.evaluate_on``), else
        screened by ``screen`` where given (``Evaluator.evaluate_screened``); None when this
        worker holds no evaluator for ``key`` and was not given its factory (it was restarted
        since, say): the caller sends the factory with it."""
        evaluator = self._evaluators.get(key)
        if evaluator is None:
            if factory is None:
                return None
            evaluator = self._evaluators[key] = factory.unpack()()
        if seeds:
            return evaluator.evaluate_on(candidate, seeds)
        if screen is not None:
            return evaluator.evaluate_screened(candidate, screen)
        return evaluator.evaluate(candidate)

    def prepare(self, key: str, factory: PackedFactory) -> dict[str, str]:
        """Build the key's evaluator (unless held) and get it ready for its first candidate
        (``Evaluator.prepare``); what was done. An evaluator that fails to get ready is not
        kept: its first candidate builds it again and reports the failure there."""
        evaluator = self._evaluators.get(key)
        if evaluator is None:
            evaluator = factory.unpack()()
            try:
                done = evaluator.prepare()
            except BaseException:
                evaluator.close()
                raise
            self._evaluators[key] = evaluator
            return done
        return evaluator.prepare()

    def pid(self) -> int:
        """This incarnation's process id: a restarted worker answers with another."""
        return os.getpid()

    def placement(self) -> dict[str, Any]:
        """Where this worker runs: its process, node, the GPUs Ray gave it and, on a GPU, the
        device's UUID as the driver reports it (two workers never share one)."""
        found: dict[str, Any] = {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(),
                                 "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
                                 "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                                 "gpu_uuid": "", "gpu_name": ""}
        if found["gpu_ids"]:
            found["gpu_uuid"], found["gpu_name"] = _gpu_identity(found["gpu_ids"][0])
        return found

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
    A task whose starting kernel fails (``StartingKernelFailed``, raised as an evaluator
    calibrates, in a preparation or an evaluation) is no death: every candidate of its key is
    answered with that verdict from then on, and no evaluator of it calibrates again.
    """

    def __init__(self, workers: list[ray.actor.ActorHandle]) -> None:
        self._workers = workers
        self._index = {id(w): i for i, w in enumerate(workers)}
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
        self._started_at = time.time()
        self._deaths = 0
        # Idle workers prepare the evaluators of the open cells, each (worker, key) pair tried
        # once: a key some worker is ready for at once, others one worker at a time.
        self._judged_keys: set[str] = set()  # keys some worker judged or prepared
        self._preparing: Counter[str] = Counter()  # keys being prepared, by how many workers
        self._tried: set[tuple[int, str]] = set()
        self._prepare_s = 0.0
        # keys whose task's starting kernel failed as an evaluator calibrated: every candidate
        # of them gets that verdict at once (calibrating again would find it again, after
        # as long: a start that hangs takes the runner's whole start-up limit)
        self._failed_starts: dict[str, Evaluation] = {}
        self._jobs: set[asyncio.Task[None]] = set()
        self._timeline: list[dict[str, Any]] = []  # what each worker did, and when

    async def open_cell(self, cell: str, factory: PackedFactory,
                        max_workers: int | None = None, group: str | None = None) -> None:
        """Admit a cell (in ``group``, see ``Share``); its factory is stored once, packed, and
        handed to each worker by reference."""
        self._share.add(Share(cell, max_workers, group))
        self._factories[cell] = (factory.key, ray.put(factory))
        self._match()  # idle workers start getting ready for it

    async def release_cell(self, cell: str) -> None:
        """Forget a cell and close its evaluators on every worker (unless another open cell
        shares them); candidates of it still waiting for a worker are refused."""
        for ticket in self._share.remove(cell):
            if not ticket.done():
                ticket.set_exception(UnknownCell(f"cell {cell!r} was released"))
        key, _ = self._factories.pop(cell, ("", None))
        if key and all(other != key for other, _ in self._factories.values()):
            self._failed_starts.pop(key, None)
            self._given = {given for given in self._given if given[1] != key}
            self._tried = {tried for tried in self._tried if tried[1] != key}
            await asyncio.gather(*(w.release.remote(key) for w in self._workers),
                                 return_exceptions=True)

    async def _acquire(self, cell: str, not_after: float | None = None) -> ray.actor.ActorHandle:
        """The next free worker in the cell's turn; ``BudgetExpired`` if none has come by
        ``not_after`` (Unix time)."""
        ticket = asyncio.get_running_loop().create_future()
        self._share.wait(cell, ticket)
        self._match()
        try:
            if not_after is None:
                return await ticket
            return await asyncio.wait_for(asyncio.shield(ticket),
                                          max(0.0, not_after - time.time()))
        except asyncio.TimeoutError:
            self._withdraw(cell, ticket)
            raise BudgetExpired("wall-time budget reached while the candidate waited for an "
                                "evaluation worker; it was not judged") from None
        except asyncio.CancelledError:
            self._withdraw(cell, ticket)
            raise

    def _withdraw(self, cell: str, ticket: asyncio.Future) -> None:
        """Take back a ticket whose caller no longer waits; a worker granted to it meanwhile
        goes back to the pool."""
        self._share.cancel(cell, ticket)
        if ticket.done() and not ticket.cancelled() and ticket.exception() is None:
            self._give_back(cell, ticket.result())
        ticket.cancel()

    def _match(self) -> None:
        """Give free workers to waiting cells, in their turns; the workers left over prepare
        what is coming."""
        while self._free:
            turn = self._share.next()
            if turn is None:
                break
            cell, ticket = turn
            if ticket.done():  # its caller went away
                self._share.done(cell)
                continue
            ticket.set_result(self._free.pop(0))
        self._prepare_free()

    def _prepare_free(self) -> None:
        """Start each idle worker on an evaluator it lacks: of a key some worker is ready for
        (its calibration is kept on disk, so this one reads it), or of a key nobody has
        prepared yet, one worker at a time (it calibrates; the others would wait for it)."""
        for worker in list(self._free):
            wanted = next(((cell, key, make) for cell, (key, make) in self._factories.items()
                           if (id(worker), key) not in self._given
                           and (id(worker), key) not in self._tried
                           and (key in self._judged_keys or key not in self._preparing)), None)
            if wanted is None:
                continue
            self._free.remove(worker)
            self._tried.add((id(worker), wanted[1]))
            self._preparing[wanted[1]] += 1
            job = asyncio.get_running_loop().create_task(self._prepare(worker, *wanted))
            self._jobs.add(job)
            job.add_done_callback(self._jobs.discard)

    async def _prepare(self, worker: ray.actor.ActorHandle, cell: str, key: str,
                       make: ray.ObjectRef) -> None:
        began, at = time.monotonic(), time.time()
        outcome, done = "ok", {}
        try:
            done = await worker.prepare.remote(key, make)
            self._given.add((id(worker), key))
            self._judged_keys.add(key)
        except StartingKernelFailed as failed:  # its candidates get the verdict
            self._failed_starts[key] = failed.evaluation
            outcome = f"failed: the starting kernel is {failed.evaluation.status.value}"
        except (RayActorError, ActorUnavailableError):  # a death, as in an evaluation
            outcome = "worker died"
            await self._died(worker)  # free again once restarted; its first candidate builds
        except Exception as exc:  # its first candidate meets the same, and reports it
            outcome = f"failed: {type(exc).__name__}"
        finally:
            self._preparing[key] -= 1
            if self._preparing[key] <= 0:
                del self._preparing[key]
            self._prepare_s += time.monotonic() - began
            self._note(worker, cell, "prepare", at, outcome, done.get("calibration", ""))
            self._free.append(worker)
            self._match()

    def _note(self, worker: ray.actor.ActorHandle, cell: str, kind: str, began: float,
              outcome: str, calibration: str = "") -> None:
        self._timeline.append({"worker": self._index.get(id(worker), -1), "cell": cell,
                               "kind": kind, "began": began, "ended": time.time(),
                               "outcome": outcome, "calibration": calibration})

    def _give_back(self, cell: str, worker: ray.actor.ActorHandle) -> None:
        self._free.append(worker)
        self._share.done(cell)
        self._match()

    async def evaluate(self, cell: str, candidate: Candidate, seeds: tuple[int, ...] = (),
                       screen: Screen | None = None, not_after: float | None = None
                       ) -> Evaluation:
        """``candidate``'s verdict from the next free worker, checked on ``seeds`` where given
        (a confirmation's secret seeds; ``Evaluator.evaluate_on``), screened by ``screen``
        where given (``Evaluator.evaluate_screened``); ``BudgetExpired`` if no worker has
        taken it by ``not_after`` (Unix time: its lineage's deadline), so that a search ends
        with its budget rather than after the queue it left."""
        if cell not in self._factories:
            raise UnknownCell(f"no cell {cell!r} in this evaluation pool; open_cell first")
        key, make = self._factories[cell]
        error = None
        for _ in range(2):
            worker = await self._acquire(cell, not_after)
            began, at = time.monotonic(), time.time()
            first = (id(worker), key) not in self._given  # its evaluator is built by this call
            outcome, calibration = "raised", ""
            try:
                evaluation = await self._judge(worker, key, make, candidate, seeds, screen)
                if (evaluation.metrics.get("runner_signal") == signal.SIGKILL
                        and await self._went_down(worker)):  # its sandbox died with it
                    error, outcome = RuntimeError(evaluation.message), "worker died"
                    await self._died(worker)
                    continue
                self._evaluations[cell] += 1
                self._judged_keys.add(key)
                outcome = evaluation.status.value
                if first:
                    calibration = str(evaluation.metrics.get("calibration", ""))
                return evaluation
            except (RayActorError, ActorUnavailableError) as exc:
                error, outcome = exc, "worker died"
                await self._died(worker)
            except StartingKernelFailed as failed:  # not the worker's fault, nor the candidate's
                self._failed_starts[key] = failed.evaluation
                raise StartingKernelFailed(failed.evaluation) from None
            except RayTaskError as exc:  # raised by the evaluator, inside the worker
                if not await self._went_down(worker):
                    raise
                error, outcome = exc, "worker died"
                await self._died(worker)
            finally:
                self._busy_s[cell] += time.monotonic() - began
                self._note(worker, cell, "evaluate", at, outcome, calibration)
                self._give_back(cell, worker)
        return Evaluation(candidate.id, Status.RUNTIME_ERROR,
                          f"the evaluation worker died twice while evaluating this candidate "
                          f"(its process was lost, e.g. killed or out of memory): {error}")

    async def _judge(self, worker: ray.actor.ActorHandle, key: str, make: ray.ObjectRef,
                     candidate: Candidate, seeds: tuple[int, ...],
                     screen: Screen | None) -> Evaluation:
        """``candidate``'s verdict from ``worker`` (on ``seeds``, where given), with the
        factory only if it may lack it."""
        if key in self._failed_starts:
            raise StartingKernelFailed(self._failed_starts[key])
        if id(worker) not in self._pids:
            self._pids[id(worker)] = await worker.pid.remote()
        given = (id(worker), key)
        evaluation = None
        if given in self._given:
            evaluation = await worker.evaluate.remote(key, candidate, None, seeds, screen)
        if evaluation is None:
            evaluation = await worker.evaluate.remote(key, candidate, make, seeds, screen)
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
        """The pool's busy fraction, worker deaths (in evaluations and preparations alike) and
        preparations in flight (``preparing``); with ``cell``, also that cell's worker
        seconds, evaluations and how many workers it holds and candidates it has waiting."""
        elapsed = max(time.monotonic() - self._started, 1e-9)
        busy = sum(self._busy_s.values()) + self._prepare_s
        out = {"busy_fraction": busy / (elapsed * len(self._workers)),
               "prepare_s": self._prepare_s,
               "preparing": float(sum(self._preparing.values())),
               "worker_deaths": float(self._deaths), "workers": float(len(self._workers))}
        if cell is not None:
            out.update({"cell_busy_s": self._busy_s[cell],
                        "cell_evaluations": float(self._evaluations[cell]),
                        "cell_holding": float(self._share.holding(cell)),
                        "cell_waiting": float(self._share.waiting(cell))})
        return out

    async def activity(self) -> dict[str, Any]:
        """What the workers did: ``intervals`` (each evaluation and preparation: worker index,
        cell, kind, Unix times began and ended, outcome, and, where it built an evaluator,
        whether its calibration was measured or read), ``workers`` (each one's
        ``EvalWorker.placement``, or why it could not answer), ``started`` (the pool's Unix
        start) and ``worker_deaths``."""
        placements = await asyncio.gather(*(w.placement.remote() for w in self._workers),
                                          return_exceptions=True)
        return {"started": self._started_at, "worker_deaths": self._deaths,
                "workers": [p if isinstance(p, dict) else {"error": str(p)[:300]}
                            for p in placements],
                "intervals": list(self._timeline)}

    async def close(self) -> None:
        for job in list(self._jobs):  # preparations in flight: their workers close below
            job.cancel()
        await asyncio.gather(*(w.close.remote() for w in self._workers), return_exceptions=True)
