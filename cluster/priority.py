"""Lowering the CPU priority of an actor's process, for the actors that are not the run's
bottleneck (the lineages, the MLflow writer).

On a machine of few cores every actor of a run starts at once: the evaluation worker (which
judges the starting kernel and then every candidate, one at a time) shares the CPUs with four
lineages importing torch and MLflow creating its store. With the others at a lower priority the
worker's start and its timed calls go first; the others use what CPU is left, and all of it when
the worker waits.
"""

from __future__ import annotations

import os
from pathlib import Path

LOWEST = 19  # the highest niceness there is


def yield_cpu(niceness: int) -> None:
    """Raise this process's niceness by ``niceness``, every thread of it: Linux keeps one per
    thread, and threads and processes started later inherit their starter's."""
    tasks = Path("/proc/self/task")
    threads = [int(t.name) for t in tasks.iterdir()] if tasks.is_dir() else [0]
    for thread in threads:
        try:
            now = os.getpriority(os.PRIO_PROCESS, thread)
            os.setpriority(os.PRIO_PROCESS, thread, min(LOWEST, now + niceness))
        except OSError:  # the thread ended meanwhile; a priority is a hint, never a failure
            continue
