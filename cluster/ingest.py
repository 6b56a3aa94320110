"""Feeding a ``TrackerActor`` records as many lineages at once do, to measure how many it takes
per second (the orchestration benchmark, ``benchmarks/cluster_scale.py``)."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import ray

from kernelswarm.search import Candidate, Evaluation, RunInfo, Sink

from .tracker_actor import TrackerActor


@dataclass(frozen=True)
class Ingested:
    """What one feeding took: seconds until every record was acknowledged (durable sinks hold
    them all), and until the tracker had closed (the background sinks had caught up)."""

    records: int
    in_flight: int
    acknowledged_s: float
    closed_s: float
    tracker_cpu_s: float  # CPU seconds the tracker's process used, start to close (NaN: unknown)
    sink_errors: tuple[str, ...]


Entry = tuple[int, int, Candidate, Evaluation]  # lineage, step, candidate, verdict


def feed_tracker(run: RunInfo, sinks: list[Sink], records: Sequence[Entry],
                 in_flight: int) -> Ingested:
    """Record every (lineage, step, candidate, verdict) through a fresh ``TrackerActor``, with at
    most ``in_flight`` calls outstanding (that many lineages waiting on their record), then
    close it."""
    return _feed(TrackerActor.remote(run, sinks, 8), records, in_flight)


@ray.remote(num_cpus=0, max_concurrency=1000)
class CallFloor:
    """Takes ``record`` calls as a ``TrackerActor`` does (an async actor, the same arguments)
    and does nothing with them: what the calls alone cost, the ceiling of any tracker's ingest
    rate on the machine measured."""

    async def record(self, lineage: int, step: int, candidate: Candidate,
                     evaluation: Evaluation) -> int:
        return step

    def stats(self) -> dict[str, int]:
        return {}

    def close(self, stop_reason: str) -> tuple[None, list[str], list[str]]:
        return None, [], []


def feed_floor(records: Sequence[Entry], in_flight: int) -> Ingested:
    """``feed_tracker``'s calls, sent the same way to a ``CallFloor``."""
    return _feed(CallFloor.remote(), records, in_flight)


def _feed(tracker: ray.actor.ActorHandle, records: Sequence[Entry], in_flight: int) -> Ingested:
    ray.get(tracker.stats.remote())  # constructed, sinks open
    pid = ray.get(tracker.__ray_call__.remote(lambda actor: os.getpid()))
    cpu_before = process_cpu_s(pid)
    pending: list[ray.ObjectRef] = []
    began = time.monotonic()
    for lineage, step, candidate, evaluation in records:  # sent inline, as lineages send them
        if len(pending) >= in_flight:
            _, pending = ray.wait(pending, num_returns=1)
        pending.append(tracker.record.remote(lineage, step, candidate, evaluation))
    ray.get(pending)
    acknowledged = time.monotonic() - began
    _, errors, _ = ray.get(tracker.close.remote("all records sent"))
    closed = time.monotonic() - began
    cpu = process_cpu_s(pid) - cpu_before
    ray.kill(tracker)
    return Ingested(len(records), in_flight, acknowledged, closed, cpu, tuple(errors))


def process_cpu_s(pid: int) -> float:
    """User plus system CPU seconds of a process on this machine, from /proc (NaN elsewhere):
    on a machine others load too, what the tracker itself costs per record."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
