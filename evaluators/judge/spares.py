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

from ..device_arena import evaluation_arena
from .runner_process import RunnerProcess, SandboxError

OWN_CORES = 2


class Spares:
    """The spare runner of one evaluator."""

    def __init__(self, arena_bytes: int, prepare: dict[str, Any], memory_limit_mb: int | None,
                 startup_s: float, in_advance: bool = True) -> None:
        self.arena_bytes = arena_bytes
        self.prepare = prepare
        self.memory_limit_mb = memory_limit_mb
        self.startup_s = startup_s
        self.in_advance = in_advance
        self.on_gpu = str(prepare["settings"]["device"]).startswith("cuda")
        self.spare: RunnerProcess | None = self._spawn() if in_advance else None

    def _spawn(self) -> RunnerProcess:
        arena = evaluation_arena(self.arena_bytes, str(self.prepare["settings"]["device"]))
        try:
            return RunnerProcess(arena, self.prepare, self.memory_limit_mb)
        except BaseException:
            arena.close()
            raise

    def start_in_advance(self) -> None:
        """From now on keep a spare prepared (the first one starts now)."""
        self.in_advance = True
        if self.spare is None:
            self.spare = self._spawn()

    def take(self) -> RunnerProcess:
        """A prepared runner (the spare, or a new one if the spare died or there is none), and
        a new spare when spares are started in advance."""
        on_demand = self.spare is None and not self.in_advance
        runner, self.spare = self.spare or self._spawn(), None
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
        if self.in_advance:
            self.spare = self._spawn()
        return runner

    def settle(self) -> None:
        """Before timing: ``wait``, unless the kernels run on the CPU and the machine has
        ``OWN_CORES`` CPUs or more for this process: the timed runner (single-threaded) and the
        spare's start-up then each have a core, and the judge waits idle. (Measured on a 2-core
        machine: waiting made an evaluation of silu_and_mul 10.7 s, not waiting 5.5 s.) On a GPU always: a spare creating its CUDA context on the
        device being timed would disturb the timing."""
        if self.on_gpu or len(os.sched_getaffinity(0)) < OWN_CORES:
            self.wait()

    def wait(self) -> None:
        """Wait until the spare is ready (or gone: the next ``take`` starts another)."""
        if self.spare is None:
            return
        try:
            self.spare.wait_ready(self.startup_s)
        except Exception:
            self.spare.close()
            self.spare = None

    def close(self) -> None:
        if self.spare is not None:
            self.spare.close()
            self.spare = None
