"""Runner processes on demand: one fresh runner per candidate, the next one warm in advance.

A runner is worth a candidate only before that candidate's code ran in it, so each one serves a
single candidate and is killed after it. Its start-up (forked from the runner template: the
task, the starting kernel and, on a GPU, CUDA; as an interpreter of its own, torch too, about
2 s of CPU) is hidden by a spare: ``take`` hands over the prepared
spare and at once starts the next one, which prepares while the candidate is checked;
``settle`` waits for it to be ready before timing starts on a GPU, and on a machine of fewer
than ``OWN_CORES`` CPUs, so that no start-up disturbs a timed call.

Where the memory plan says a second runner would not fit beside an evaluation (a problem of
several GB: evaluators/judge/memory_plan.py), there is no spare: ``take`` starts the runner then
(its ``started_as`` says so), and two big arenas never coexist.
"""

from __future__ import annotations

import os
from typing import Any

from ..measure.device_arena import evaluation_arena
from .runner_process import RunnerProcess, SandboxError

OWN_CORES = 2
GPU_OWN_CORES = 8
CORES_PER_SPARE = 4


class Spares:
    """The spare runners of one evaluator: up to ``pool`` preparing or prepared at once (one
    until ``widen``; several only where the machine has the cores for their start-ups beside
    the judging)."""

    def __init__(self, arena_bytes: int, prepare: dict[str, Any], memory_limit_mb: int | None,
                 startup_s: float, in_advance: bool = True) -> None:
        self.arena_bytes = arena_bytes
        self.prepare = prepare
        self.memory_limit_mb = memory_limit_mb
        self.startup_s = startup_s
        self.in_advance = in_advance
        self.on_gpu = str(prepare["settings"]["device"]).startswith("cuda")
        self.pool = 1  # ``widen`` raises it
        self.spares: list[RunnerProcess] = []
        if in_advance:
            self._fill()

    @property
    def spare(self) -> RunnerProcess | None:
        """The spare the next ``take`` hands over, if any."""
        return self.spares[0] if self.spares else None

    def _spawn(self) -> RunnerProcess:
        arena = evaluation_arena(self.arena_bytes, str(self.prepare["settings"]["device"]))
        try:
            return RunnerProcess(arena, self.prepare, self.memory_limit_mb)
        except BaseException:
            arena.close()
            raise

    def _fill(self) -> None:
        while len(self.spares) < self.pool:
            self.spares.append(self._spawn())

    def widen(self, pool: int) -> None:
        """Keep up to ``pool`` spares (within one per ``CORES_PER_SPARE`` CPUs); those missing
        start now where spares start in advance."""
        cores = len(os.sched_getaffinity(0))
        self.pool = max(1, min(pool, cores // CORES_PER_SPARE))
        if self.in_advance:
            self._fill()

    def start_in_advance(self) -> None:
        """From now on keep spares prepared (they start now)."""
        self.in_advance = True
        self._fill()

    def take(self, refill: bool = True) -> RunnerProcess:
        """A prepared runner (the oldest spare, or a new one if it died or there is none), and
        new spares when spares are started in advance (not before ``refill`` where it is
        False: the caller times something at once and no start-up may share the CPU)."""
        on_demand = not self.spares and not self.in_advance
        runner = self.spares.pop(0) if self.spares else self._spawn()
        if on_demand:
            runner.started_as = f"on demand, no spare in advance (memory plan); " \
                                f"{runner.started_as}"
        try:
            runner.wait_ready(self.startup_s)
        except SandboxError:
            runner.close()  # e.g. killed from outside while it waited: one more try
            runner = self._spawn()
            try:
                runner.wait_ready(self.startup_s)
            except BaseException:
                runner.close()
                raise
        if refill:
            self.refill()
        return runner

    def refill(self) -> None:
        """Start the spares missing, where spares are started in advance."""
        if self.in_advance:
            self._fill()

    def settle(self) -> None:
        """Before timing: ``wait``, unless this process has ``OWN_CORES`` CPUs or more and the
        spares' start-up cannot slow the timed calls: on the CPU, the timed runner
        (single-threaded) and a spare's start-up then each have a core (measured on a 2-core
        machine: waiting made an evaluation of silu_and_mul 10.7 s, not waiting 5.5 s). On a
        GPU, a spare's start-up is host work (its imports are the template's; the driver's
        context, the profiler) but for a few warm-up calls of microseconds: it waits only on a
        machine of fewer than ``GPU_OWN_CORES`` CPUs, where it would take the judge's and the
        runner's cores (on an H200 a Triton runner's start-up, ~5 s with its profiler, made
        every evaluation wait 3.7 s for it). The canary of every timed shape (the starting
        kernel against its calibration) still catches a measurement that something disturbed."""
        cores = len(os.sched_getaffinity(0))
        if cores < (GPU_OWN_CORES if self.on_gpu else OWN_CORES):
            self.wait()

    def wait(self) -> None:
        """Wait until every spare is ready (one that is gone is dropped: ``take`` starts
        another)."""
        for spare in list(self.spares):
            try:
                spare.wait_ready(self.startup_s)
            except Exception:
                spare.close()
                self.spares.remove(spare)

    def close(self) -> None:
        for spare in self.spares:
            spare.close()
        self.spares = []
