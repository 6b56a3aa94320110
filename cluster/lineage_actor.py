"""A lineage as a Ray actor: the search's ``Driver`` with ports over the tracker and dispatcher
actors, compiling on its own CPU before asking the pool (through its cell's lane) for a GPU."""

from __future__ import annotations

import contextlib
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import ray

from kernelswarm.search import (
    Budget,
    Candidate,
    Compiler,
    Driver,
    Evaluation,
    KnobTuner,
    Lineage,
    Roles,
    journal_storage,
)

from .packed import PackedFactory
from .pool import Lane
from .ports import ActorTracker, DispatchedEvaluator
from .priority import yield_cpu
from .retry import call

# A lineage yields the CPU to the evaluation worker, the run's bottleneck (priority.py): its
# start (torch and the task imported, its roles and compiler made) and its compiles wait for
# the worker's start and timed calls on a machine of few cores, and take every core it leaves.
LINEAGE_NICENESS = 10


@dataclass(frozen=True)
class LineageResult:
    lineage: int
    steps: int
    stop_reason: str
    best_speedup: float
    error: str = ""  # a traceback when the lineage itself crashed
    restarts: int = 0  # times it was restarted from its records after a crash
    crashes: tuple[str, ...] = ()  # what each of those crashes said


@ray.remote(num_cpus=0, max_concurrency=2)
class LineageActor:
    """Runs one lineage until its budget or planner stops it, or ``stop`` is called.

    Compiling here (the compile pool is the lineage actors' CPUs) means an evaluation worker
    only ever receives candidates that built, and never waits for a compiler.
    """

    def __init__(self, lineage: int, seed: int, start: Candidate,
                 make_roles: PackedFactory[Roles], make_compiler: PackedFactory[Compiler],
                 tracker: ray.actor.ActorHandle, lane: Lane, tuner_journal: Path | None,
                 max_repairs: int = 2,
                 first_candidates: tuple[Candidate, ...] = (), screen_shapes: int = 0) -> None:
        # What takes seconds (the roles, the task's module and the compiler) is made here, so
        # that the actor can be started while the starting kernel is still being judged;
        # ``run`` then gets the verdict and the budget. The factories come packed: unpickled
        # here, after the priority is lowered, not before as Ray's arguments are.
        yield_cpu(LINEAGE_NICENESS)
        self._stop = threading.Event()
        self._number, self._start, self._max_repairs = lineage, start, max_repairs
        self._firsts = first_candidates  # judged first (LanguageStart.first_candidates)
        self._screen_shapes = screen_shapes
        storage = journal_storage(tuner_journal) if tuner_journal else None
        self._tuner = KnobTuner(seed=seed, storage=storage, prefix=f"lineage{lineage}-")
        self._roles = make_roles.unpack()(seed)
        self._compiler = make_compiler.unpack()()
        self._tracker = tracker
        self._lane = lane

    def stop(self) -> None:
        self._stop.set()

    def run(self, start_eval: Evaluation, budget: Budget,
            history: list[tuple[Candidate, Evaluation]] | None = None) -> LineageResult:
        """Search from the starting kernel's ``start_eval`` within ``budget``, going on from the
        steps in ``history`` (a resumed or restarted lineage). The roles' model calls end with
        the budget's wall time."""
        deadline = None if budget.wall_s is None else time.time() + budget.wall_s
        if deadline is not None:
            self._roles.until(deadline)
        lineage = Lineage(self._number, self._start, start_eval, self._roles, self._tuner,
                          budget, max_repairs=self._max_repairs,
                          first_candidates=self._firsts, screen_shapes=self._screen_shapes)
        for candidate, evaluation in history or ():  # pick up where it stopped
            lineage.replay(candidate, evaluation)
        # Pipelined: each record is made durable while the next candidate is being planned,
        # compiled and dispatched; at most one is in flight, and it is settled before this
        # returns (crashed or not), so a restart reads every step this lineage took.
        tracker = None
        try:
            population = call(self._tracker.population)
            tracker = ActorTracker(self._tracker, owner=lineage.lineage, pipelined=True,
                                   migration=population.migration,
                                   novelty=population.novelty > 0)
            driver = Driver(tracker, DispatchedEvaluator(self._compiler, self._lane, deadline),
                            stop=self._stop)
            reason = driver.run(lineage)
            tracker.settle()
        except Exception:
            if tracker is not None:
                with contextlib.suppress(Exception):  # the crash is what is reported
                    tracker.settle()
            return LineageResult(lineage.lineage, lineage.step, "crashed", lineage.best_speedup,
                                 traceback.format_exc())
        finally:
            self._compiler.close()
        return LineageResult(lineage.lineage, lineage.step, reason, lineage.best_speedup)
