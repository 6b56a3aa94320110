"""The problems of a benchmark run as processes of their own, several at once, each in a limit.

A problem's search is one process (``python -m ... --one PROBLEM``): on a GPU machine each runs
with one GPU visible (``CUDA_VISIBLE_DEVICES``), so that every GPU works on one problem at a
time and a crash, a CUDA error or a hang takes one problem down, not the run. A process that
outlives its limit is killed with its whole process group, and the row says what it was doing
(the stage it last wrote). Every finished problem is appended at once to ``results.jsonl``
(one JSON object a line, written and synced before the next problem is started on that slot),
so a run killed midway loses only the problems in flight, and ``--resume`` goes on from the
file.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

POLL_S = 0.5
LOG_TAIL = 600  # characters of a failed process's log kept in its row


@dataclass(frozen=True)
class Slot:
    """Where one problem at a time runs: a name for the table and the environment it adds."""

    name: str
    env: Mapping[str, str] = field(default_factory=dict)


def visible_gpus() -> list[str]:
    """The GPUs this process may use: ``CUDA_VISIBLE_DEVICES`` when set, else one per line of
    ``nvidia-smi -L`` (none where there is no driver)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [g.strip() for g in listed.split(",") if g.strip() and g.strip() != "-1"]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30,
                             check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    listed = [row for row in out.splitlines() if row.startswith("GPU ")]
    return [str(i) for i in range(len(listed))]


def shared_ray() -> dict[str, str]:
    """``RAY_ADDRESS`` of the Ray instance this process is connected to, if any: the problems'
    processes join it rather than each starting one (a test's shared instance, a cluster)."""
    if "ray" not in sys.modules:  # never connected: nothing to share (and no import of Ray)
        return {}
    from kernelswarm.cluster import current_address

    address = current_address()
    return {"RAY_ADDRESS": address} if address else {}


def slots(device: str, parallel: int | None) -> list[Slot]:
    """One slot per GPU on ``cuda`` (the first ``parallel`` of them when given), else
    ``parallel`` slots (1 by default) sharing the machine. ``ValueError`` when ``cuda`` is
    asked for and no GPU is visible."""
    if device.split(":")[0] == "cuda":
        gpus = visible_gpus()
        if not gpus:
            raise ValueError("--device cuda, but no GPU is visible (CUDA_VISIBLE_DEVICES is "
                             "empty or nvidia-smi lists none)")
        gpus = gpus[:parallel] if parallel else gpus
        return [Slot(f"gpu {g}", {**shared_ray(), "CUDA_VISIBLE_DEVICES": g}) for g in gpus]
    return [Slot(f"worker {i}", shared_ray()) for i in range(parallel or 1)]


class ResultsFile:
    """``results.jsonl``: one finished problem a line, appended and synced as each finishes."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def rows(self) -> dict[str, dict[str, Any]]:
        """The rows kept, by problem (a later line for a problem replaces an earlier one; a
        line cut short by a kill is skipped)."""
        found: dict[str, dict[str, Any]] = {}
        if not self.path.is_file():
            return found
        for line in self.path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and isinstance(row.get("problem"), str):
                found[row["problem"]] = row
        return found

    def append(self, row: Mapping[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("ab+") as handle:
            size = handle.seek(0, os.SEEK_END)
            cut = size > 0 and (handle.seek(size - 1) or handle.read(1)) != b"\n"
            # a line cut short by a kill stays a line of its own, skipped when read
            line = ("\n" if cut else "") + json.dumps(row, default=str) + "\n"
            handle.write(line.encode())
            handle.flush()
            os.fsync(handle.fileno())


@dataclass
class _Running:
    problem: str
    slot: Slot
    process: subprocess.Popen[bytes]
    result: Path
    log: Path
    began: float
    handle: TextIO


def stage_file(result: Path) -> Path:
    """Where a problem's process writes what it is doing (read when it is killed)."""
    return result.with_name(result.name + ".stage")


def write_stage(result: Path, stage: str) -> None:
    stage_file(result).write_text(stage)


def run_jobs(problems: Iterable[str], command: Callable[[str, Path], list[str]],
             where: list[Slot], limit_s: float, work: Path, results: ResultsFile,
             done: Callable[[dict[str, Any]], None]) -> None:
    """Run ``command(problem, result_file)`` for every problem, one per slot at a time, each
    within ``limit_s``; each process writes its row (a JSON object with ``problem``) to
    ``result_file``. The row, or one saying why there is none, goes to ``results`` and to
    ``done`` as each process ends. Logs are ``work/logs/<problem>.log``."""
    queue = list(problems)
    free = list(where)
    running: list[_Running] = []
    (work / "logs").mkdir(parents=True, exist_ok=True)
    (work / "rows").mkdir(parents=True, exist_ok=True)
    try:
        while queue or running:
            while queue and free:
                running.append(_start(queue.pop(0), free.pop(0), command, work))
            time.sleep(POLL_S)
            for job in list(running):
                row = _finished(job, limit_s)
                if row is None:
                    continue
                running.remove(job)
                free.append(job.slot)
                row = {**row, "slot": job.slot.name,
                       "wall_s": round(time.monotonic() - job.began, 1)}
                results.append(row)
                done(row)
    finally:
        for job in running:  # interrupted: nothing of ours keeps running
            _kill(job)


def _start(problem: str, slot: Slot, command: Callable[[str, Path], list[str]],
           work: Path) -> _Running:
    result = work / "rows" / f"{problem}.json"
    for stale in (result, stage_file(result)):
        stale.unlink(missing_ok=True)
    log = work / "logs" / f"{problem}.log"
    handle = log.open("w")
    process = subprocess.Popen(command(problem, result), stdout=handle,
                               stderr=subprocess.STDOUT, env={**os.environ, **slot.env},
                               start_new_session=True)
    return _Running(problem, slot, process, result, log, time.monotonic(), handle)


def _finished(job: _Running, limit_s: float) -> dict[str, Any] | None:
    """The row of a job that has ended (or was just killed at its limit); None while it runs."""
    code = job.process.poll()
    if code is None and time.monotonic() - job.began <= limit_s:
        return None
    if code is None:
        _kill(job)
        stage = _read(stage_file(job.result)) or "starting"
        return {"problem": job.problem,
                "status": f"time limit: still running after {limit_s:.0f} s ({stage})"}
    job.handle.close()
    text = _read(job.result)
    if text:
        try:
            row = json.loads(text)
        except json.JSONDecodeError:
            row = None
        if isinstance(row, dict) and row.get("problem") == job.problem:
            return row
    tail = " ".join((_read(job.log) or "").split())[-LOG_TAIL:]
    how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
    return {"problem": job.problem,
            "status": f"its process ended without a result ({how}): {tail or 'no output'}"}


def _kill(job: _Running) -> None:
    try:
        os.killpg(job.process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        job.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    job.handle.close()


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""
