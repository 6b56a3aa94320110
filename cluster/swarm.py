"""A whole search on Ray: tracker, evaluation workers, dispatcher and lineage actors.

A search may hold several kernel languages (``SwarmSpec.more_languages``): lineage ``i``
searches the ``i % n``-th, from that language's starting kernel, judged by that language's
evaluator (a cell of its own on the pool). Kernels are ranked across languages by their speedup
over the first language's starting kernel (search/archive_languages.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayError

from kernelswarm.search import (
    Budget,
    Candidate,
    Compiler,
    Confirmation,
    Confirmed,
    Evaluation,
    Evaluator,
    LanguageScales,
    Migration,
    Population,
    Record,
    Roles,
    RunInfo,
    RunSummary,
    SecretSeeds,
    Sink,
    StartingKernelFailed,
    choose,
)

from .lineage_actor import LineageActor, LineageResult
from .packed import PackedFactory
from .pool import EvalPool, verdict
from .ports import ActorTracker, call
from .tracker_actor import TrackerActor

SEED_LINEAGE = -1  # the starting kernels' evaluations are recorded under this lineage


@dataclass(frozen=True)
class LanguageStart:
    """One language of a search: its starting kernel, the evaluator that judges (and compiles)
    its candidates, and the roles of its lineages."""

    start: Candidate
    make_evaluator: Callable[[], Evaluator]
    make_roles: Callable[[int], Roles]
    # Kernels each lineage of the language judges first, before its roles propose (a start
    # generated from torch.compile): the lineage goes on from one that is faster than ``start``.
    first_candidates: tuple[Candidate, ...] = ()
    # What a lineage builds its candidates with (only ``compile`` and ``close`` are called):
    # something lighter than the evaluator where building needs less (SandboxBuilder does not
    # load the task, nor torch); None: ``make_evaluator``.
    make_compiler: Callable[[], Compiler] | None = None

    @property
    def language(self) -> str:
        return self.start.language

    @property
    def compiler_factory(self) -> Callable[[], Compiler]:
        return self.make_compiler or self.make_evaluator


@dataclass(frozen=True)
class SwarmSpec:
    """Everything a search on the cluster needs; factories are shipped to the actors."""

    run: RunInfo
    sinks: list[Sink]
    start: Candidate
    make_evaluator: Callable[[], Evaluator]
    make_roles: Callable[[int], Roles]
    seeds: list[int]  # one per lineage
    budget: Budget
    workers: int
    worker_resources: dict[str, float] = field(default_factory=lambda: {"num_cpus": 1})
    elites: int = 8
    tuner_journal: Path | None = None
    history: tuple[Record, ...] = ()  # a resumed run's records, replayed, never re-evaluated
    migration: Migration = field(default_factory=Migration)
    # The search strategy and its settings (search/strategies/); ``elites`` and ``migration``
    # above replace its own.
    population: Population = field(default_factory=Population)
    max_repairs: int = 2
    screen_shapes: int = 0  # search/screening.py; 0: every candidate timed on every shape
    max_workers: int | None = None  # a cap on the pool's workers this search holds at once
    # Every record of the run read back from its durable sink: what a restarted tracker
    # rebuilds itself from (experiments.resume.replay_records); None: it restarts from history.
    replay: Callable[[], Sequence[Record]] | None = None
    lineage_restarts: int = 2  # times a crashed lineage is restarted from its records
    lineage_options: dict[str, Any] = field(default_factory=dict)  # Ray options, e.g. placement
    # Unix time the run started (its start-up, ``SwarmResult.startup_s``, counts from there;
    # None: from the swarm's creation). ``budget.wall_s`` counts from the search's start, once
    # the starting kernels are judged: every lineage stops by then plus ``budget.wall_s``, and a
    # lineage restarted later gets what is left of it.
    started: float | None = None
    # Languages searched beside ``start``'s (its language is the reference): lineage i searches
    # ``languages[i % len(languages)]``. Migration.languages must name the same rotation.
    more_languages: tuple[LanguageStart, ...] = ()
    first_candidates: tuple[Candidate, ...] = ()  # the first language's (LanguageStart's)
    make_compiler: Callable[[], Compiler] | None = None  # the first language's (LanguageStart's)
    # How many seeds the evaluators check correctness on (EvaluatorSettings.seeds): the
    # confirmation checks its repeats on as many secret ones (search/confirm.py).
    check_seeds: int = 3

    @property
    def languages(self) -> tuple[LanguageStart, ...]:
        """Every language of the search, the reference (``start``'s) first."""
        return (LanguageStart(self.start, self.make_evaluator, self.make_roles,
                              self.first_candidates, self.make_compiler),
                *self.more_languages)

    def language_of(self, lineage: int) -> LanguageStart:
        """The language lineage ``lineage`` searches."""
        languages = self.languages
        return languages[lineage % len(languages)]


@dataclass(frozen=True)
class SwarmResult:
    summary: RunSummary
    start: Evaluation | None  # the starting kernel's evaluation
    lineages: list[LineageResult]
    sink_errors: list[str]
    locations: list[str]  # where each sink wrote, in sink order
    utilisation: dict[str, float]
    confirmation: Confirmation | None = None  # the best kernels judged again (search/confirm.py)
    # Each language's starting kernel's evaluation, the reference language's first; ``scales``:
    # how kernels of the languages were ranked. One entry, scale 1, in a single-language run.
    starts: dict[str, Evaluation] = field(default_factory=dict)
    scales: LanguageScales = field(default_factory=LanguageScales)
    # What the search's own pool of workers did (EvalPool.activity; cluster/activity.py); None
    # on a shared pool, whose owner keeps it (a sweep's workers.json).
    activity: dict[str, Any] | None = None
    # Seconds from the run's start to the search's (Ray, the actors, calibration, the starting
    # kernels' verdicts): outside search.wall_time_s; NaN where the search never started.
    startup_s: float = math.nan

    @property
    def languages(self) -> tuple[str, ...]:
        """The languages searched, the reference first: lineage i searched ``[i % n]``."""
        return tuple(self.starts)

    def language_of(self, lineage: int) -> str:
        languages = self.languages
        return languages[lineage % len(languages)] if languages else ""

    @property
    def failed_start(self) -> Evaluation | None:
        """The verdict of a starting kernel that failed its task (the search stopped there);
        None when every start passed."""
        return next((e for e in self.starts.values() if not e.ok), None)


class Swarm:
    """Lifecycle: ``start`` (evaluates the starting kernel, launches lineages), ``stats`` while
    running, ``finish`` once ``done`` (or ``abort`` to stop early; recorded results are kept)."""

    def __init__(self, spec: SwarmSpec, pool: EvalPool | None = None) -> None:
        self.spec = spec
        self.tracker = TrackerActor.remote(spec.run, spec.sinks, spec.elites, list(spec.history),
                                           spec.migration, spec.replay, spec.population)
        # A pool given is shared (a sweep's): this search is one cell of it and leaves it open.
        self._own_pool = pool is None
        self.pool = EvalPool(spec.workers, spec.worker_resources) if pool is None else pool
        # One cell per language (each language's evaluator judges its candidates), in one
        # group: together they hold at most max_workers and take one turn per round. The
        # reference language's cell is named after the run, as in a single-language search.
        self.lanes = {part.language: self.pool.open(
            spec.run.run_id if i == 0 else f"{spec.run.run_id}/{part.language}",
            part.make_evaluator, spec.max_workers, spec.run.run_id)
            for i, part in enumerate(spec.languages)}
        self.lane = self.lanes[spec.start.language]
        self.starts: dict[str, Evaluation] = {}
        self.scales = LanguageScales()
        self.lineage_actors: list[Any] = []
        self._waiting: dict[int, Any] = {}  # lineage actors started, not yet running
        self._pending: list[ray.ObjectRef] = []
        self._crashes: list[list[str]] = []  # per lineage: why each restart was needed
        self._stopping = False
        self.start_eval: Evaluation | None = None
        self._created = time.time()
        self.deadline: float | None = None  # when every lineage stops (set as the search starts)
        self.startup_s = math.nan  # set as the search starts

    def start(self) -> Evaluation:
        spec = self.spec
        tracker = ActorTracker(self.tracker)
        known = {part.language: tracker.lookup(part.start.id) for part in spec.languages}
        # The languages' starting kernels are judged at once where there are workers for it,
        # and the lineages' actors start meanwhile (each imports the task and makes its
        # compiler: seconds of CPU that would otherwise come after the verdict).
        pending = {part.language: self.lanes[part.language].submit(part.start)
                   for part in spec.languages if known[part.language] is None}
        self._waiting = {lineage: self._actor(lineage) for lineage in range(len(spec.seeds))}
        for step, part in enumerate(spec.languages):  # each language's start: its own step
            evaluation = known[part.language]
            if evaluation is None:
                try:
                    evaluation = self._verdict(pending[part.language], part.start)
                except StartingKernelFailed as failed:  # found as its evaluator calibrated
                    evaluation = failed.evaluation
                evaluation = evaluation.as_own_start()  # 1.0 over itself, not a timing's noise
                tracker.record(SEED_LINEAGE, step, part.start, evaluation)
            self.starts[part.language] = evaluation
            if step == 0:
                self.start_eval = evaluation
            if not evaluation.ok:
                raise StartingKernelFailed(evaluation)
        # Raises when two starting kernels cannot be compared: ranking them would be a guess.
        self.scales = LanguageScales.of_starts(
            [(part.start, self.starts[part.language]) for part in spec.languages])
        # the search starts: its wall-time budget counts from here
        now = time.time()
        self.startup_s = now - (spec.started or self._created)
        if spec.budget.wall_s is not None:
            self.deadline = now + spec.budget.wall_s
        for lineage in range(len(spec.seeds)):
            history = sorted((r for r in spec.history if r.lineage == lineage),
                             key=lambda r: r.step)
            self.lineage_actors.append(None)
            self._pending.append(None)
            self._crashes.append([])
            self._launch(lineage, [(r.candidate, r.evaluation) for r in history])
        return self.start_eval

    def _actor(self, lineage: int) -> Any:
        """A new actor for ``lineage`` (it runs once ``_launch`` gives it the start's verdict)."""
        spec = self.spec
        part = spec.language_of(lineage)
        start = part.start.derive(lineage=lineage, origin=part.start.origin)
        return LineageActor.options(**spec.lineage_options).remote(
            lineage, spec.seeds[lineage], start, PackedFactory.of(part.make_roles),
            PackedFactory.of(part.compiler_factory),
            self.tracker, self.lanes[part.language], spec.tuner_journal, spec.max_repairs,
            part.first_candidates, spec.screen_shapes)

    def _launch(self, lineage: int, history: list[tuple[Candidate, Evaluation]]) -> None:
        """Run ``lineage``'s actor (the one started for it, or a new one), going on from the
        steps in ``history``."""
        spec = self.spec
        part = spec.language_of(lineage)
        actor = self._waiting.pop(lineage, None)
        budget = spec.budget
        if self.deadline is not None:
            left = self.deadline - time.time()
            if left <= 0 and not history:  # no actor to run: it would stop at once
                if actor is not None:
                    ray.kill(actor)
                self._pending[lineage] = ray.put(LineageResult(
                    lineage, 0, f"wall-time budget reached ({spec.budget.wall_s:g} s) before "
                                f"the lineage could be restarted", 0.0))
                return
            budget = replace(budget, wall_s=max(0.0, left))
        actor = actor if actor is not None else self._actor(lineage)
        self.lineage_actors[lineage] = actor
        self._pending[lineage] = actor.run.remote(self.starts[part.language], budget, history)

    def _crash(self, lineage: int) -> str | None:
        """Why ``lineage``'s finished run crashed (it raised, or its process died); None if it
        stopped as lineages do."""
        try:
            result = ray.get(self._pending[lineage])
        except RayError as exc:
            return f"the lineage's actor died: {exc}"
        return result.error or None

    def _restart_crashed(self, ready: list[ray.ObjectRef]) -> int:
        """Restart each crashed lineage among ``ready`` from its records (as a resumed run
        does), up to ``spec.lineage_restarts`` times each; how many were restarted."""
        restarted = 0
        for lineage, ref in enumerate(self._pending):
            if ref not in ready or self._stopping \
                    or len(self._crashes[lineage]) >= self.spec.lineage_restarts:
                continue
            crash = self._crash(lineage)
            if crash is None:
                continue
            self._crashes[lineage].append(crash)
            ray.kill(self.lineage_actors[lineage])  # a hung process must not record beside its successor
            call(self.tracker.release_owner, lineage)  # claims it died holding
            self._launch(lineage, call(self.tracker.history, lineage))
            restarted += 1
        return restarted

    def stats(self) -> dict[str, Any]:
        stats = call(self.tracker.stats)
        stats["utilisation"] = self._utilisation()
        return stats

    def _utilisation(self) -> dict[str, float]:
        """The pool's figures, with this search's cell figures summed over its languages."""
        out = self.lane.utilisation()
        for lane in self.lanes.values():
            if lane is not self.lane:
                for key, value in lane.utilisation().items():
                    if key.startswith("cell_"):
                        out[key] = out.get(key, 0.0) + value
        return out

    def done(self, timeout: float = 0.0) -> bool:
        ready, _ = ray.wait(self._pending, num_returns=len(self._pending), timeout=timeout)
        if self._restart_crashed(ready):
            return False
        return len(ready) == len(self._pending)

    def _close_pool(self) -> None:
        """Close the pool if it is this search's own; a shared pool only closes this search's
        evaluators (its owner closes the rest)."""
        if self._own_pool:
            self.pool.close()
        else:
            for lane in self.lanes.values():
                self.pool.release(lane.cell)

    def abort(self) -> None:
        """Ask every lineage to stop after its current step."""
        self._stopping = True
        for actor in self.lineage_actors:
            if actor is not None:  # None: a lineage never started
                actor.stop.remote()

    def _lineage_results(self) -> list[LineageResult]:
        """Each lineage's result, with the crashes it was restarted after; a lineage actor that
        died for good is reported, the others are kept."""
        results = []
        for lineage, ref in enumerate(self._pending):
            try:
                result = ray.get(ref)
            except RayError as exc:
                result = LineageResult(lineage, 0, "crashed", 0.0,
                                       f"the lineage's actor died: {exc}")
            crashes = tuple(self._crashes[lineage])
            results.append(replace(result, restarts=len(crashes), crashes=crashes))
        return results

    def confirm(self, top: int, repeats: int,
                announce: Callable[[int], None] | None = None) -> Confirmation:
        """Judge the ``top`` best kernels ``repeats`` more times each, once every lineage has
        stopped (so nothing else runs beside them), through the same workers and settings, with
        correctness checked on ``spec.check_seeds`` secret seeds drawn now (none of the
        search's); the one with the best median is what the run reports (search/confirm.py
        says why). ``announce(n)``: called before the ``n`` kernels are judged."""
        began = time.monotonic()
        elites = self._to_confirm(top) if top > 0 and repeats > 0 else []
        # Drawn here, in the driver, and sent only with the repeats below: no lineage, agent
        # or tracker has held them before they are used.
        seeds = SecretSeeds.draw(self.spec.check_seeds)
        if elites and announce is not None:
            announce(len(elites))
        # Interleaved (a, b, a, b, ...): a drift of the machine touches every kernel alike.
        refs = [[] for _ in elites]
        for _ in range(repeats):
            for i, (candidate, _found) in enumerate(elites):
                refs[i].append(self.lanes[candidate.language].submit(candidate, seeds.values))

        kernels = tuple(Confirmed(candidate, found,
                                  tuple(self._verdict(r, candidate, seeds.values)
                                        for r in refs[i]))
                        for i, (candidate, found) in enumerate(elites))
        return Confirmation(repeats, kernels, choose(kernels, self.scales),
                            time.monotonic() - began,
                            "" if elites else "no kernel besides the starting one to confirm",
                            self.scales, seeds if elites else None)

    def _verdict(self, ref: ray.ObjectRef, candidate: Candidate,
                 seeds: tuple[int, ...] = ()) -> Evaluation:
        """The evaluation ``ref`` (a lane's ``submit``, on ``seeds``) stands for; sent again
        through the lane if the dispatcher was lost meanwhile (once Ray has restarted it). A
        starting kernel that fails its task is raised as ``StartingKernelFailed``: sending
        again changes nothing."""
        try:
            return verdict(ref)
        except StartingKernelFailed:
            raise
        except RayError:
            return self.lanes[candidate.language].evaluate(candidate, seeds)

    def _to_confirm(self, top: int) -> list[tuple[Candidate, Evaluation]]:
        """The ``top`` best kernels (over the reference start), then each language's best
        where it is not among them. A starting kernel is 1.0x by definition (what it measured
        against itself is noise): the search's best is its best other kernel."""
        starts = {part.start.id for part in self.spec.languages}
        # the archive keeps at most its elites plus each language's best
        ranked = [(c, e) for c, e in call(self.tracker.elites, self.spec.elites + len(starts))
                  if c.id not in starts]
        chosen = ranked[:top]
        for part in self.spec.languages:
            best = next((m for m in ranked if m[0].language == part.language), None)
            if best is not None and all(best[0].id != c.id for c, _ in chosen):
                chosen.append(best)
        return chosen

    def finish(self, stop_reason: str | None = None,
               confirmation: Confirmation | None = None) -> SwarmResult:
        """Close the run; with a ``confirmation``, the kernel it chose (by its median repeat)
        is the run's best in every sink, or none when no kernel held up."""
        lineages = self._lineage_results()
        utilisation = self._utilisation()
        reasons = sorted({r.stop_reason for r in lineages if r.stop_reason})
        confirmed = (confirmation is not None and not confirmation.skipped)
        summary, sink_errors, locations = call(
            self.tracker.close, stop_reason or "; ".join(reasons) or "no lineage ran",
            best=confirmation.best() if confirmed else None, override_best=confirmed)
        activity = self.pool.activity() if self._own_pool else None
        self._close_pool()
        for actor in [*self.lineage_actors, *self._waiting.values(), self.tracker]:
            if actor is not None:
                ray.kill(actor)
        self._waiting = {}
        return SwarmResult(summary, self.start_eval, lineages, sink_errors, locations,
                           utilisation, confirmation, dict(self.starts), self.scales,
                           activity, self.startup_s)
