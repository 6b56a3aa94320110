"""The Tracker as a Ray actor: the single writer of a run's results, restartable.

A tracker whose process dies is restarted by Ray (``max_restarts``) and rebuilds itself from
what was recorded: ``replay`` reads the run's records back (its Parquet files, written and synced
before each record was acknowledged), so claims, lookups, bests and the archive migrants come
from are as before. Records are keyed by (lineage, step): a ``record`` call retried after the
actor died returns the record already written instead of writing a second one. Claims held by
callers when it died are claimed again by the callers (``ports.ActorTracker``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from typing import IO, Any

import ray

from kernelswarm.search import (
    Candidate,
    Evaluation,
    Migration,
    Population,
    Record,
    Rejection,
    RunInfo,
    RunSummary,
    Sink,
    Tracker,
)

from .sink_actor import ProcessSink

TRACKER_RESTARTS = 20  # restarts of one run's tracker before Ray gives up on it
RESTARTS_LOG = "tracker_restarts.jsonl"  # one line per restart, in the run folder
MIGRATIONS_LOG = "migrations.jsonl"  # one line per batch of migrants handed out, synced
REJECTIONS_LOG = "rejections.jsonl"  # one line per candidate novelty rejection kept from judging
CLAIMS_LOG = "claims.log"  # "claim <id> <owner>" and "release <id>" lines, in call order


def _reconstructed() -> bool:
    """Whether Ray is running this actor's constructor again after its process died."""
    with warnings.catch_warnings():  # Ray's own property reads a deprecated one of its own
        warnings.simplefilter("ignore", DeprecationWarning)
        return ray.get_runtime_context().was_current_actor_reconstructed


# An async actor: its plain methods run one at a time on the event loop's thread, so records
# keep one total order; only ``record`` awaits (the durable write), so that many records share it.
@ray.remote(num_cpus=0, max_concurrency=1000, max_restarts=TRACKER_RESTARTS, max_task_retries=0)
class TrackerActor:
    """Wraps ``search.Tracker``; one call at a time, so records keep one total order, except
    that records arriving together are made durable together (group commit).

    ``history``: a resumed run's records (already in the sinks). ``replay``: reads every record
    of the run back from its durable sink; called at every start, so a restarted tracker goes on
    from the last acknowledged record. Without ``replay`` a restart fails (the tracker is lost).
    """

    def __init__(self, run: RunInfo, sinks: list[Sink], elites: int,
                 history: list[Record] | None = None, migration: Migration | None = None,
                 replay: Callable[[], Sequence[Record]] | None = None,
                 population: Population | None = None) -> None:
        restarted = _reconstructed()
        if restarted and replay is None:
            # Going on from ``history`` would give new records the seqs of lost ones, and a
            # sink would write them over: fail instead (the run's callers see the tracker dead).
            raise RuntimeError(f"run {run.run_id}: the tracker's process was lost and it has no "
                               f"replay to rebuild its records from")
        resumed = list(history or ())
        records = list(replay()) if replay is not None else resumed
        # Background sinks write from a process of their own (sink_actor.py): their cost
        # would otherwise delay every answer this process gives the lineages.
        sinks = [sink if sink.durable else ProcessSink(sink) for sink in sinks]
        self._tracker = Tracker(run, sinks, elites=elites, history=records,
                                migration=migration, population=population)
        self._status = Counter()
        self._lineages: dict[int, dict[str, Any]] = {}
        self._keys: dict[tuple[int, int], Record] = {}
        self._owners: dict[str, int] = {}  # claimed candidate id -> the lineage holding it
        self._flushing: asyncio.Future | None = None  # the durable write under way, if any
        for record in records:
            self._count(record)
        self._migrations = run.run_dir / MIGRATIONS_LOG
        self._migrated: dict[tuple[int, int], list[tuple[Candidate, Evaluation]]] = {}
        self._replay_migrations(records)
        self._rejections = run.run_dir / REJECTIONS_LOG
        self._replay_rejections()
        self._claims = self._open_claims(run, restarted)
        self._restarts = self._note_restart(run, restarted, len(records), len(resumed))

    def _open_claims(self, run: RunInfo, restarted: bool) -> IO[str]:
        """The claims log: replayed on a restart (the lineages holding them live on), emptied
        on a fresh start (a resumed run's holders died with its driver). Each line reaches the
        operating system before the call returns, not the disk: it has to outlive the tracker's
        process, not the machine (a lost machine loses the lineages holding them too)."""
        path = run.run_dir / CLAIMS_LOG
        if restarted and path.exists():
            for line in path.read_text().splitlines():
                match line.split():  # a line torn by the crash matches nothing
                    case ["claim", candidate_id, owner]:
                        _, mine = self._tracker.claim(candidate_id)
                        if mine and owner != "-":
                            self._owners[candidate_id] = int(owner)
                    case ["release", candidate_id]:
                        self._owners.pop(candidate_id, None)
                        self._tracker.release(candidate_id)
        return path.open("a" if restarted else "w", buffering=1)  # line-buffered

    def _replay_migrations(self, records: list[Record]) -> None:
        """Put the migrants handed out before back on the islands they went to (after every
        record: an island that overflowed since may keep other members than it did)."""
        if not self._migrations.exists():
            return
        members = {r.candidate.id: (r.candidate, r.evaluation) for r in records}
        for line in self._migrations.read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:  # a line torn by the crash: its call never returned
                continue
            moved = [members[i] for i in entry["ids"] if i in members]
            self._tracker.restore_migrants(entry["lineage"], moved)
            self._migrated[(entry["lineage"], entry["step"])] = moved

    def _note_restart(self, run: RunInfo, restarted: bool, replayed: int, resumed: int) -> int:
        """On a restart: log it in the run folder, and give the background sinks (MLflow) the
        records of this session again: they open a new run, which then holds all of them."""
        log = run.run_dir / RESTARTS_LOG
        if restarted:
            for record in self._tracker.records[resumed:replayed]:
                self._tracker.rewrite_background(record)
            with log.open("a") as out:
                out.write(json.dumps({"time": time.time(), "records_replayed": replayed}) + "\n")
        return len(log.read_text().splitlines()) if log.exists() else 0

    def claim(self, candidate_id: str, owner: int | None = None) -> tuple[Evaluation | None, bool]:
        """``Tracker.claim``; ``owner`` (a lineage) may claim an id it holds again (a call
        retried after a restart, or its claims renewed) and have it granted again."""
        if owner is not None and self._owners.get(candidate_id) == owner \
                and self._tracker.lookup(candidate_id) is None:
            return None, True
        known, mine = self._tracker.claim(candidate_id)
        if mine:
            self._claims.write(f"claim {candidate_id} {'-' if owner is None else owner}\n")
            if owner is not None:
                self._owners[candidate_id] = owner
        return known, mine

    def release(self, candidate_id: str) -> None:
        self._claims.write(f"release {candidate_id}\n")
        self._owners.pop(candidate_id, None)
        self._tracker.release(candidate_id)

    def release_owner(self, owner: int) -> list[str]:
        """Give up every claim ``owner`` holds (its actor died with them); the ids released."""
        ids = [cid for cid, holder in self._owners.items() if holder == owner]
        for candidate_id in ids:
            self.release(candidate_id)
        return ids

    def lookup(self, candidate_id: str) -> Evaluation | None:
        return self._tracker.lookup(candidate_id)

    def migration(self) -> Migration:
        """How migrants move: a lineage's port asks only on the steps it names."""
        return self._tracker.migration

    def population(self) -> Population:
        """The run's strategy and settings: a lineage's port asks ``novel`` only when novelty
        rejection is on."""
        return self._tracker.population

    def novel(self, candidate: Candidate) -> Rejection | None:
        """``Tracker.novel``; a rejection is logged in the run folder (what was not judged and
        why), so a restarted or resumed tracker counts it still."""
        rejection = self._tracker.novel(candidate)
        if rejection is not None:
            with self._rejections.open("a") as out:
                out.write(json.dumps(dataclasses.asdict(rejection)) + "\n")
        return rejection

    def _replay_rejections(self) -> None:
        if not self._rejections.exists():
            return
        rejections = []
        for line in self._rejections.read_text().splitlines():
            try:
                rejections.append(Rejection(**json.loads(line)))
            except (json.JSONDecodeError, TypeError):  # a line torn by a crash
                continue
        self._tracker.restore_rejections(rejections)

    def lookup_binary(self, candidate_id: str, binary: str) -> Evaluation | None:
        return self._tracker.lookup_binary(candidate_id, binary)

    def migrants(self, lineage: int, step: int) -> list[tuple[Candidate, Evaluation]]:
        """``Tracker.migrants``, kept in the run folder before they are handed out, so a call
        retried after a restart gets the same migrants and none is sent twice."""
        if (lineage, step) in self._migrated:
            return self._migrated[(lineage, step)]
        moved = self._tracker.migrants(lineage, step)
        if moved:
            line = json.dumps({"lineage": lineage, "step": step, "ids": [c.id for c, _ in moved]})
            with self._migrations.open("a") as out:
                out.write(line + "\n")
                out.flush()
                os.fsync(out.fileno())
            self._migrated[(lineage, step)] = moved
        return moved

    async def record(self, lineage: int, step: int, candidate: Candidate,
                     evaluation: Evaluation) -> int:
        """Record one verdict; its seq, once durable. The same (lineage, step) recorded again (a
        call retried after the actor died) is not written twice: the first record's seq is
        returned."""
        known = self._keys.get((lineage, step))
        if known is not None:
            if known.candidate.id != candidate.id:
                raise ValueError(
                    f"lineage {lineage} step {step} is recorded already with candidate "
                    f"{known.candidate.id}; refusing a second record with {candidate.id}")
            self._owners.pop(candidate.id, None)
            self._tracker.release(candidate.id)
            await self._durable(known.seq)
            return known.seq
        record = self._tracker.accept(lineage, step, candidate, evaluation)
        self._owners.pop(candidate.id, None)
        self._count(record)
        await self._durable(record.seq)
        return record.seq

    async def _durable(self, seq: int) -> None:
        """Return once record ``seq`` is in the durable sinks. One flush, on a thread, writes
        every record accepted before it began; records accepted meanwhile wait for the next."""
        while self._tracker.durable_count <= seq:
            if self._flushing is None:
                self._flushing = asyncio.ensure_future(asyncio.to_thread(self._tracker.flush))
            flushing = self._flushing
            try:
                await asyncio.shield(flushing)
            finally:
                if self._flushing is flushing:
                    self._flushing = None

    def history(self, lineage: int) -> list[tuple[Candidate, Evaluation]]:
        """What ``lineage`` recorded, in step order (to restart it from)."""
        records = sorted((r for r in self._tracker.records if r.lineage == lineage),
                         key=lambda r: r.step)
        return [(r.candidate, r.evaluation) for r in records]

    def _count(self, record: Record) -> None:
        self._keys[(record.lineage, record.step)] = record
        evaluation = record.evaluation
        self._status[evaluation.status.value] += 1
        self._lineages[record.lineage] = {
            "steps": record.step, "best": record.lineage_best,
            "language": record.candidate.language,
            "last_status": evaluation.status.value, "last_move": record.candidate.origin.move,
            "last_speedup": evaluation.speedup}

    def best(self) -> tuple[Candidate, Evaluation] | None:
        return self._tracker.best()

    def elites(self, k: int) -> list[tuple[Candidate, Evaluation]]:
        return self._tracker.elites(k)

    def stats(self) -> dict[str, Any]:
        """A cheap snapshot for progress views."""
        best = self._tracker.best()  # its speedup over the reference start (several languages)
        return {"records": len(self._tracker.records), "status": dict(self._status),
                "lineages": dict(self._lineages),
                "best": self._tracker.measure(best) if best else 0.0,
                "diversity": self._tracker.diversity(),
                "population": self._tracker.figures(),
                "sink_errors": list(self._tracker.sink_errors),
                "tracker_restarts": self._restarts}

    def close(self, stop_reason: str, best: tuple[Candidate, Evaluation] | None = None,
              override_best: bool = False) -> tuple[RunSummary, list[str], list[str]]:
        """Flush and close the sinks: the summary, sink errors, and where each sink wrote.
        ``override_best``: the run reports ``best`` (a confirmed kernel, or None) instead of
        the search's own best."""
        summary = self._tracker.close(stop_reason, best=best, override_best=override_best)
        return summary, list(self._tracker.sink_errors), self._tracker.locations()
