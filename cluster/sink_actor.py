"""A background sink (MLflow) in a process of its own, so that its cost never slows the tracker.

The tracker's process answers every lineage's claim, lookup and record; a background sink fed
in that process (MLflow's SQLAlchemy store takes milliseconds per record, nearly all of it
Python holding the interpreter lock) delays each of those answers while it writes. The
``TrackerActor`` therefore hands each non-durable sink to a ``SinkActor`` beside it and keeps a
``ProcessSink`` in its place: writing a batch there only ships the records.

The ``SinkActor`` queues what it receives and writes everything queued as one batch, so the
further the sink falls behind, the larger (and cheaper per record) its batches get. It is owned
by the tracker's process and ends with it: a restarted tracker starts a new one, as it opened a
new MLflow run when the sink lived in its own process.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from kernelswarm.search import Record, RunInfo, RunSummary, Sink

from .priority import yield_cpu

# Below the lineages (lineage_actor.LINEAGE_NICENESS): the worker waits for their candidates,
# nobody waits for MLflow before the run closes.
SINK_NICENESS = 15


class SinkFailed(RuntimeError):
    """The sink in the other process raised; its message names the sink and the error."""


def _result(ref: ray.ObjectRef) -> object:
    # ``ray.get`` without its warning about blocking an async actor's event loop: the tracker
    # waits here from its sink thread, or while closing, when nothing else is to be done.
    return ref.future().result()


@ray.remote(num_cpus=0, max_restarts=0, max_task_retries=0)
class SinkActor:
    """Writes one sink's records, in the order received, from a thread of its own.

    ``write`` only queues; ``close`` waits until everything queued is written. The first error
    disables the sink (what was queued after it is dropped, as the tracker drops a failed
    sink) and is returned by every later call.
    """

    def __init__(self, sink: Sink) -> None:
        # In the background by design: MLflow's import, its store's creation and its writes
        # wait for the evaluation worker and the lineages (priority.py)
        yield_cpu(SINK_NICENESS)
        self._sink = sink
        self._name = type(sink).__name__
        self._queue: list[Record] = []
        self._changed = threading.Condition()
        self._writing = False
        self._error = ""
        self._opened = False
        self._thread: threading.Thread | None = None

    def open(self, run: RunInfo) -> str:
        """Open the sink and start writing; the error, if it could not be opened."""
        try:
            self._sink.open(run)
        except Exception as exc:
            self._error = f"{self._name} could not be opened: {type(exc).__name__}: {exc}"
            return self._error
        self._opened = True
        self._thread = threading.Thread(target=self._drain, name="sink-writer", daemon=True)
        self._thread.start()
        return ""

    def write(self, records: list[Record]) -> str:
        """Queue ``records`` (in ``seq`` order, after those queued before); the sink's error so
        far ("" if none)."""
        with self._changed:
            if not self._error:
                self._queue.extend(records)
                self._changed.notify_all()
            return self._error

    def _drain(self) -> None:
        while True:
            with self._changed:
                while not self._queue:
                    self._changed.wait()
                batch, self._queue = self._queue, []
                self._writing = True
            try:
                self._sink.write_batch(batch)
            except Exception as exc:  # the sink is done for: keep the error, drop the rest
                with self._changed:
                    self._error = f"{self._name}: {type(exc).__name__}: {exc}"
                    self._queue = []
            finally:
                with self._changed:
                    self._writing = False
                    self._changed.notify_all()

    def close(self, summary: RunSummary) -> str:
        """Write what is queued, then close the sink; its error ("" if none)."""
        with self._changed:
            while self._queue or self._writing:
                self._changed.wait()
        if self._error or not self._opened:
            return self._error
        try:
            self._sink.close(summary)
        except Exception as exc:
            self._error = f"{self._name} failed to close: {type(exc).__name__}: {exc}"
        return self._error

    def location(self) -> str:
        return self._sink.location()


class ProcessSink(Sink):
    """Stands in a tracker for a background sink that runs in a ``SinkActor``.

    ``open`` starts the actor on the tracker's node (a ``sqlite:///`` store and the run folder
    are where the tracker finds them) and opens the sink there without waiting for it: MLflow's
    import and a new store's tables take seconds, which the tracker's start, and so the starting
    kernel's evaluation and every lineage, would wait for. The first ``write`` or ``close``
    waits for the opening; a sink that could not be opened raises ``SinkFailed`` there, and the
    tracker disables and reports it as any failed sink (the durable Parquet sink goes on).
    """

    durable = False

    def __init__(self, sink: Sink) -> None:
        if sink.durable:
            raise ValueError(f"{type(sink).__name__} is durable: the tracker writes it itself")
        self.sink = sink
        self._actor: ray.actor.ActorHandle | None = None
        self._opening: ray.ObjectRef | None = None  # the sink's opening, until it is read
        self._reading = threading.Lock()  # the tracker's writer thread and its own both call
        self._failed = ""  # why the sink could not be opened
        self._location = ""  # kept at close: the actor is gone after it

    def open(self, run: RunInfo) -> None:
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
        self._actor = SinkActor.options(scheduling_strategy=here).remote(self.sink)
        self._opening = self._actor.open.remote(run)

    def _handle(self) -> ray.actor.ActorHandle:
        """The actor, once the sink is open in it; ``SinkFailed`` if it could not be."""
        with self._reading:
            if self._opening is not None:
                error, self._opening = _result(self._opening), None
                if error:
                    ray.kill(self._actor)
                    self._actor, self._failed = None, str(error)
            if self._failed:
                raise SinkFailed(self._failed)
            if self._actor is None:
                raise RuntimeError(f"ProcessSink({type(self.sink).__name__}) used before open()")
            return self._actor

    def write(self, record: Record) -> None:
        self.write_batch([record])

    def write_batch(self, records: Sequence[Record]) -> None:
        if error := _result(self._handle().write.remote(list(records))):
            raise SinkFailed(error)

    def close(self, summary: RunSummary) -> None:
        actor = self._handle()
        try:
            error = _result(actor.close.remote(summary))
            self._location = _result(actor.location.remote())
        finally:
            ray.kill(actor)
            self._actor = None
        if error:
            raise SinkFailed(error)

    def location(self) -> str:
        if self._actor is None:
            return self._location
        return _result(self._handle().location.remote())
