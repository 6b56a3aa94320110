"""Where a run's wall time goes: a line in its ``run.log`` as each phase ends.

Each line gives the time since the process started, the phase's own wall time, the CPU seconds
spent so far by this process and by every process of the run (Ray's, the actors', the
sandboxed runners', the compilers'), and the load average. On a shared machine a wall time alone
says little; the CPU seconds and the load say whether a phase was slow or only waited its turn.

    [phase] ray started           at   6.12 s  +3.40 s  cpu: driver 2.91 s, run 5.82 s  load 1.07
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_started() -> float:
    """This process's start as Unix time (Linux: from /proc; elsewhere: now)."""
    try:
        since_boot = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().split("\n")
                    if line.startswith("btime "))
        return boot + since_boot / _TICK
    except (OSError, IndexError, ValueError, StopIteration):
        return time.time()


def _stats() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds of the process and of its children it has reaped)."""
    stats = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        stats[int(entry.name)] = (int(fields[1]), sum(int(f) for f in fields[11:15]) / _TICK)
    return stats


def tree_cpu_s(root: int | None = None) -> float | None:
    """CPU seconds of process ``root`` (this one) and every live descendant, each with what its
    reaped children spent; None where /proc cannot say (not Linux)."""
    root = os.getpid() if root is None else root
    try:
        stats = _stats()
    except OSError:
        return None
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, (0, 0.0))[1]
        todo.extend(children.get(pid, ()))
    return total


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


class PhaseLog:
    """Phase lines for a run's log; lines marked before the log is known (the configuration
    loaded, the run folder made) are written when ``attach`` names it."""

    def __init__(self, started: float | None = None) -> None:
        self.started = process_started() if started is None else started
        self.last = self.started
        self.lines: list[str] = []
        self.path: Path | None = None
        self._lock = threading.Lock()  # a phase may end on another thread (Ray's shutdown)

    def attach(self, path: Path) -> None:
        """Write the lines so far to ``path`` (appended), and every later one as it comes."""
        self.path = path
        self._write(self.lines)

    def mark(self, phase: str) -> None:
        """``phase`` has ended now."""
        with self._lock:
            self._mark(phase)

    def _mark(self, phase: str) -> None:
        now = time.time()
        driver = time.process_time()
        tree = tree_cpu_s()
        run = "" if tree is None else f", run {tree:.2f} s"
        line = (f"[phase] {phase:<26} at {now - self.started:7.2f} s  +{now - self.last:6.2f} s"
                f"  cpu: driver {driver:.2f} s{run}  load {_load()}")
        self.last = now
        self.lines.append(line)
        if self.path is not None:
            self._write([line])

    def _write(self, lines: list[str]) -> None:
        if self.path is None or not lines:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as log:
            log.write("".join(line + "\n" for line in lines))
