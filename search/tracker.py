"""The tracker: single writer of results, keeper of the archive and the global best."""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Sequence
from typing import Any

from .archive import Archive, Member, source_family
from .candidate import Candidate
from .evaluation import Evaluation, Status
from .population import Migration, Population
from .sink import Record, RunInfo, RunSummary, Sink
from .strategies import Rejection, Strategy, make_strategy

log = logging.getLogger(__name__)


BACKGROUND_BATCH = 500  # records a background sink is given at most at once


class Tracker:
    """Keeps every evaluation, the archive and the best kernels; writes sinks in record order.

    Durable sinks are written before ``record`` returns; the others are fed by one background
    thread, so a slow tracking server never holds up a lineage. A sink that fails is reported in
    ``sink_errors`` and disabled; the others go on.

    Per-lineage results have one source, ``lineage_best``: the best OK kernel recorded under
    that lineage (what it evaluated itself, a verdict reused for it included; kernels it received
    by migration or adopted are not its results). Records (``Record.lineage_best``, hence Parquet
    and MLflow), the summary (console, summary.json, MLflow) all read it. A resumed run's tracker
    starts from the recorded history: its wall time, counts and reused verdicts cover the whole
    run.

    The population's rules are the ``strategy``'s (search/strategies/, chosen by
    ``population.strategy``); ``elites`` and ``migration``, where given, replace those of
    ``population``.
    """

    def __init__(self, run: RunInfo, sinks: list[Sink], elites: int | None = None,
                 history: Sequence[Record] = (), migration: Migration | None = None,
                 population: Population | None = None) -> None:
        self.run = run
        population = population or Population()
        if elites is not None:
            population = dataclasses.replace(population, elites=elites)
        if migration is not None:
            population = dataclasses.replace(population, migration=migration)
        self.population = population
        self.migration = population.migration
        self.archive = Archive(elites=population.elites)
        self.strategy: Strategy = make_strategy(population, self.archive)
        self.reused = 0
        self.records: list[Record] = []
        self._lineage_best: dict[int, tuple[Candidate, Evaluation]] = {}
        self.sink_errors: list[str] = []
        self._sinks = list(sinks)
        self._durable = [s for s in sinks if s.durable]
        self._background = [s for s in sinks if not s.durable]
        # A resumed run goes on from the wall time of its last record.
        self._started = time.monotonic() - max((r.wall_s for r in history), default=0.0)
        self._lock = threading.Lock()
        self._claimed: set[str] = set()
        self._queue: queue.Queue[Record | None] = queue.Queue()
        # Group commit: records accepted but not yet in the durable sinks, written together by
        # whichever caller flushes first (one file and one sync for many records).
        self._unwritten: list[Record] = []
        self._durable_changed = threading.Condition()  # guards _writing and durable_count
        self._writing = False
        self.durable_count = len(history)  # records with seq below this are in durable sinks
        for record in history:  # a resumed run: already in the sinks, so not written again
            self._keep(record.candidate, record.evaluation)
            self._note_lineage_best(record.lineage, record.candidate, record.evaluation)
            self.reused += bool(record.evaluation.reused_from)
            self.records.append(record)
        for sink in sinks:
            sink.open(run)
        self._thread = threading.Thread(target=self._drain, name="tracker-sinks", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        # Whatever has queued up while the last batch was written goes out as one batch.
        while True:
            batch, end = [self._queue.get()], False
            while len(batch) < BACKGROUND_BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if None in batch:
                batch, end = batch[:batch.index(None)], True
            if batch:
                self._write(self._background, batch)
            if end:
                return

    def _write(self, sinks: list[Sink], records: list[Record]) -> None:
        for sink in list(sinks):
            try:
                sink.write_batch(records)
            except Exception as exc:  # a broken sink must not lose the others' records
                message = f"{type(sink).__name__} failed and was disabled: {type(exc).__name__}: {exc}"
                log.error(message)
                self.sink_errors.append(message)
                sinks.remove(sink)

    def claim(self, candidate_id: str) -> tuple[Evaluation | None, bool]:
        """Reserve a candidate for evaluation: (its known verdict, False) if recorded already;
        (None, True) if the caller should evaluate it; (None, False) if another caller is
        evaluating it now and its verdict is coming (wait for it with ``lookup``)."""
        with self._lock:
            known = self.archive.seen(candidate_id)
            if known is not None or candidate_id in self._claimed:
                return known, False
            self._claimed.add(candidate_id)
            return None, True

    def release(self, candidate_id: str) -> None:
        """Give up a claim without recording (the evaluation could not be done)."""
        with self._lock:
            self._claimed.discard(candidate_id)

    def lookup(self, candidate_id: str) -> Evaluation | None:
        """The evaluation already recorded for this id, if any (duplicates are not re-evaluated)."""
        return self.archive.seen(candidate_id)

    def lookup_binary(self, candidate_id: str, binary: str) -> Evaluation | None:
        """The verdict of an earlier candidate that compiled to the same ``binary``, re-issued
        for ``candidate_id`` (no worker time), or None. The caller's claim stays until it
        records that verdict (the driver does at once), so nobody evaluates it meanwhile."""
        with self._lock:
            found = self.archive.seen_binary(binary) if binary else None
            if found is None or found[0] == candidate_id:
                return None
            self.reused += 1
        first, evaluation = found
        return dataclasses.replace(
            evaluation, candidate_id=candidate_id, eval_s=0.0,
            reused_from=first,
            message=f"same compiled binary as {first}, whose verdict this is: "
                    f"{evaluation.message}")

    def migrants(self, lineage: int, step: int) -> list[Member]:
        """Elites for ``lineage`` when its step is a migration step (every ``interval``), else
        none; they join its island."""
        if not self.migration.due(step):
            return []
        with self._lock:
            return self.strategy.share(lineage, step)

    def restore_migrants(self, lineage: int, members: list[Member]) -> None:
        """Kernels handed to ``lineage`` before a restart, back on its side (see the Ray
        tracker actor, which logs them)."""
        with self._lock:
            self.strategy.restored(lineage, members)

    def novel(self, candidate: Candidate) -> Rejection | None:
        """Why ``candidate`` is not to be judged (novelty rejection: too close to a judged
        kernel; counted in the summary), or None: judge it."""
        with self._lock:
            return self.strategy.admit(candidate)

    def restore_rejections(self, rejections: Sequence[Rejection]) -> None:
        """Rejections made before a restart or a resume (the Ray tracker actor logs them)."""
        with self._lock:
            self.strategy.novelty.rejected.extend(rejections)

    def diversity(self) -> float:
        with self._lock:
            return self.strategy.diversity()

    def measure(self, member: Member) -> float:
        """A kernel's speedup over the reference starting kernel (comparable across languages)."""
        return self.archive.measure(member)

    def figures(self) -> dict[str, Any]:
        """The strategy's name and figures: the kernels it keeps and how many source families
        they are, novelty rejections, and the strategy's own (cells, migrations, ...)."""
        with self._lock:
            kept = self.strategy.kept()
            return {"strategy": self.strategy.name, "kept": len(kept),
                    "kept_families": len({source_family(c) for c, _ in kept}),
                    "rejected": len(self.strategy.novelty.rejected), **self.strategy.figures()}

    def _keep(self, candidate: Candidate, evaluation: Evaluation) -> None:
        self.archive.add(candidate, evaluation)
        self.strategy.add(candidate, evaluation)

    def record(self, lineage: int, step: int, candidate: Candidate, evaluation: Evaluation) -> Record:
        """Store one evaluation; returns the record once durable sinks hold it."""
        record = self.accept(lineage, step, candidate, evaluation)
        self.flush()
        return record

    def accept(self, lineage: int, step: int, candidate: Candidate,
               evaluation: Evaluation) -> Record:
        """Take one evaluation into the archive and the total order; it is durable only once
        ``flush`` has run (``durable_count > record.seq``). ``record`` is the two together."""
        with self._lock:
            self._claimed.discard(candidate.id)
            self._keep(candidate, evaluation)
            lineage_best = self._note_lineage_best(lineage, candidate, evaluation)
            best = self.archive.best
            record = Record(
                seq=len(self.records), lineage=lineage, step=step, candidate=candidate,
                evaluation=evaluation,
                lineage_best=lineage_best[1].speedup if lineage_best else 0.0,
                # over the reference starting kernel: comparable across languages
                global_best=self.archive.measure(best) if best else 0.0,
                wall_s=time.monotonic() - self._started, timestamp=time.time(),
                diversity=self.strategy.diversity())
            self.records.append(record)
            self._unwritten.append(record)
        return record

    def flush(self) -> None:
        """Write every accepted record to the durable sinks, as one batch, then queue them for
        the background sinks. Callers flushing at once wait for one another: a record accepted
        before this call is durable when it returns."""
        with self._lock:
            target = len(self.records)
        while True:
            # Waiting on a condition, not on the writer's lock: when a batch is written, every
            # caller it held returns at once instead of queueing to find out one by one.
            with self._durable_changed:
                while self._writing and self.durable_count < target:
                    self._durable_changed.wait()
                if self.durable_count >= target:
                    return
                self._writing = True
            batch: list[Record] = []
            try:
                with self._lock:
                    batch, self._unwritten = self._unwritten, []
                if batch:
                    self._write(self._durable, batch)
                    for record in batch:
                        self._queue.put(record)
            finally:
                with self._durable_changed:
                    self._writing = False
                    if batch:
                        self.durable_count = batch[-1].seq + 1
                    self._durable_changed.notify_all()

    def rewrite_background(self, record: Record) -> None:
        """Queue an already recorded ``record`` for the background sinks again (a restarted
        tracker's MLflow run is new: it is given the records the lost one had)."""
        self._queue.put(record)

    def _note_lineage_best(self, lineage: int, candidate: Candidate, evaluation: Evaluation
                           ) -> tuple[Candidate, Evaluation] | None:
        """Update and return ``lineage``'s best with a verdict recorded under it."""
        known = self._lineage_best.get(lineage)
        if evaluation.ok and (known is None or evaluation.speedup > known[1].speedup):
            self._lineage_best[lineage] = known = (candidate, evaluation)
        return known

    def lineage_best(self, lineage: int) -> tuple[Candidate, Evaluation] | None:
        """The best OK kernel recorded under ``lineage`` (see the class docstring)."""
        with self._lock:
            return self._lineage_best.get(lineage)

    def best(self) -> tuple[Candidate, Evaluation] | None:
        return self.archive.best

    def elites(self, k: int) -> list[tuple[Candidate, Evaluation]]:
        return self.archive.elites[:k]

    def summary(self, stop_reason: str, best: Member | None = None,
                override_best: bool = False) -> RunSummary:
        """The run's summary; ``override_best``: report ``best`` (a kernel confirmed after the
        search, search/confirm.py, or None when none held up) instead of the archive's."""
        lineage_best = {i: best for i, best in self._lineage_best.items() if i >= 0}
        best = best if override_best else self.archive.best
        # each screened-out evaluation once: another lineage's step that reused it is no second
        screened = {r.candidate.id: r.evaluation for r in reversed(self.records)
                    if r.evaluation.status is Status.SCREENED_OUT and not r.evaluation.reused_from}
        saved = sum(float(e.metrics.get("screen", {}).get("saved_s", 0.0))
                    for e in screened.values())
        return RunSummary(stop_reason, len(self.records), best, lineage_best,
                          time.monotonic() - self._started, self.strategy.diversity(),
                          len(self.strategy.shared), self.reused, self.strategy.name,
                          len(self.strategy.novelty.rejected), self.figures(),
                          len(screened), saved)

    def locations(self) -> list[str]:
        """Where each sink's output can be found (as each sink describes it)."""
        return [text for sink in self._sinks if (text := sink.location())]

    def close(self, stop_reason: str, best: Member | None = None,
              override_best: bool = False) -> RunSummary:
        """Flush the background sinks and close every sink (``best``: see ``summary``)."""
        self.flush()
        self._queue.put(None)
        self._thread.join()
        summary = self.summary(stop_reason, best, override_best)
        for sink in self._durable + self._background:
            try:
                sink.close(summary)
            except Exception as exc:
                self.sink_errors.append(f"{type(sink).__name__} failed to close: {exc}")
        return summary
