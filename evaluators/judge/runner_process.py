"""The judge's side of one runner process: spawn it, talk to it, enforce time, bury it.

One ``RunnerProcess`` is one runner (evaluators/runner/): forked by the runner template, a
process that has imported torch and the runner's modules and never runs candidate code
(evaluators/runner/template.py, judge/runner_template.py), or, where there is none,
``python -m kernelswarm.evaluators.runner`` started with ``subprocess.Popen``. Either way it is
in a new session (its own process group, so that a kill reaches anything it started), and never
a fork of the judge. It gets a fresh scratch folder as
working directory, the scrubbed environment (evaluators/environment.py), the OS isolation of
evaluators/sandbox/isolation.py where the platform allows it (namespaces), two pipes and the
evaluation's shared arena (evaluators/measure/shared_memory.py), passed by descriptor number. Its stdout
and stderr go to ``runner.log`` in the scratch folder, whose tail is quoted when it dies.

A runner serves exactly one candidate and is then killed with its whole group: no state of a
candidate reaches the next one. ``request`` returns an outcome and never raises for what the
runner did: ``Replied`` (a frame), ``Crashed`` (end of file, or garbage on the channel) or
``TimedOut``.
"""

from __future__ import annotations

import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...search import TaskError
from ..channel import ChannelError, FrameBuffer, write_frame
from ..environment import python_path, scrubbed_environment
from ..measure.shared_memory import BaseArena
from ..protocol import RUNNER_MODULE, WARMING
from ..sandbox.isolation import isolated_command, isolation_marker, launcher
from .jit_cache import copy_tree
from .runner_template import (
    TemplateChild,
    TemplateUnavailable,
    runner_template,
    template_refusal,
    template_wanted,
)

LOG_TAIL_CHARS = 1500
LOG_SCAN_CHARS = 64 * 1024  # how far back a crash report's first line is looked for
_REAP_TIMEOUT_S = 5.0
_KILL_WAIT_S = 10.0

# Kernels are single-threaded; keep the libraries under torch from starting thread pools too.
_RUNNER_VARIABLES = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                     "OPENBLAS_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


class SandboxError(RuntimeError):
    """A runner could not start, could not be killed, or failed before any candidate code ran."""


@dataclass(frozen=True)
class Replied:
    message: dict[str, Any]


@dataclass(frozen=True)
class Crashed:
    returncode: int | None  # negative: killed by that signal; None: alive but channel unusable
    log_tail: str
    detail: str = ""  # set when the channel carried a malformed frame


@dataclass(frozen=True)
class TimedOut:
    limit_s: float
    log_tail: str


Outcome = Replied | Crashed | TimedOut


def runner_environment() -> dict[str, str]:
    """What a runner's process gets as its environment: this one's without credentials, one
    thread per library under torch, and this process's import path."""
    return scrubbed_environment(extra={**_RUNNER_VARIABLES, "PYTHONPATH": python_path()})


def start_runner_template(device: str) -> None:
    """Start this process's runner template now, in the background, where runners for
    ``device`` come from it: its imports then overlap whatever this process does before its
    first runner (an evaluation worker: the other actors starting)."""
    if template_wanted(device):
        threading.Thread(
            target=lambda: runner_template(runner_environment(), launcher().namespaces),
            name="runner-template", daemon=True).start()


class RunnerProcess:
    """One live runner, its channel and its arena; ``prepare`` is sent at once (a spare)."""

    def __init__(self, arena: BaseArena, prepare: dict[str, Any],
                 memory_limit_mb: int | None = None) -> None:
        self.arena = arena
        self.scratch = Path(tempfile.mkdtemp(prefix="kernelswarm-sandbox-"))
        self.log_path = self.scratch / "runner.log"
        self.started = time.perf_counter()
        self.ready: dict[str, Any] | None = None
        self.ready_s = float("nan")  # seconds from spawn until its ready reply was read
        self.unkillable = ""
        self.started_as = ""  # how its process started (evaluation metrics: runner_started_as)
        self.warming = False  # its start-up reached the starting kernel's warm-up calls
        request_r, self._request_w = os.pipe()
        self._reply_r, reply_w = os.pipe()
        env = runner_environment()
        try:
            with open(self.log_path, "wb") as log:
                self.process = self._start(env, (request_r, reply_w, arena.fd, log.fileno()),
                                           memory_limit_mb,
                                           str(prepare.get("settings", {}).get("device", "cpu")))
        except BaseException:
            os.close(self._request_w)
            os.close(self._reply_r)
            shutil.rmtree(self.scratch, ignore_errors=True)
            raise
        finally:
            os.close(request_r)  # the runner's ends; keeping them would hide its death from us
            os.close(reply_w)
        self._frames = FrameBuffer()
        self._pending: list[dict[str, Any]] = []
        self._closed = False
        self._send({**prepare, "arena": arena.describe()})

    def _start(self, env: dict[str, str], fds: tuple[int, int, int, int],
               memory_limit_mb: int | None, device: str) -> subprocess.Popen | TemplateChild:
        """The runner's process: forked by the runner template where there is one for
        ``device``, else an interpreter of its own; either way in the OS isolation of
        evaluators/sandbox/isolation.py (namespaces where the platform allows) and a session of its
        own."""
        namespaces = launcher().namespaces
        wanted = template_wanted(device)
        template = runner_template(env, namespaces) if wanted else None
        if template is not None:
            try:
                child = template.spawn(fds, self.scratch, memory_limit_mb,
                                       isolation_marker(template.namespaces)
                                       if template.namespaces else "")
                self.started_as = "forked from the runner template"
                return child
            except TemplateUnavailable as exc:  # gone meanwhile: the next runner starts another
                why = str(exc)
        else:
            why = template_refusal()
        self.started_as = f"an interpreter of its own ({why})"
        request_r, reply_w, arena_fd, log = fds
        argv = [sys.executable, "-m", RUNNER_MODULE, "--request-fd", str(request_r),
                "--reply-fd", str(reply_w), "--arena-fd", str(arena_fd)]
        if memory_limit_mb is not None:
            argv += ["--memory-limit-mb", str(memory_limit_mb)]
        argv, options = isolated_command(argv, self.scratch)
        return subprocess.Popen(
            argv, cwd=self.scratch, env=env, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, pass_fds=(request_r, reply_w, arena_fd),
            **{"start_new_session": True, **options})

    @property
    def alive(self) -> bool:
        return not self._closed and self.process.poll() is None

    def _send(self, message: dict[str, Any]) -> bool:
        try:
            write_frame(self._request_w, message)
        except OSError:
            return False
        return True

    def wait_ready(self, timeout_s: float) -> dict[str, Any]:
        """The reply to ``prepare``; ``SandboxError`` (or ``TaskError``) when it does not come."""
        if self.ready is not None:
            return self.ready
        outcome = self.start_up_reply(timeout_s)
        if isinstance(outcome, Replied) and outcome.message.get("type") == "ready":
            self.ready = outcome.message
            self.ready_s = time.perf_counter() - self.started
            return self.ready
        self.kill()
        if isinstance(outcome, Replied):
            raise_fault(outcome.message, "the runner failed to start")
        what = (f"did not get ready within {timeout_s:g} s" if isinstance(outcome, TimedOut)
                else "died while starting")
        raise SandboxError(f"the runner {what}; its log ends with:\n{outcome.log_tail}")

    def start_up_reply(self, timeout_s: float, warm_up_s: float | None = None) -> Outcome:
        """The outcome of the start-up: its ``ready`` (or what came instead) within
        ``timeout_s`` of now, and within ``warm_up_s`` of the ``warming`` frame, where given
        (the starting kernel's warm-up calls: a hang there is the kernel's)."""
        offset = self._log_size()
        deadline = time.monotonic() + timeout_s
        outcome = self._receive(timeout_s, offset)
        if isinstance(outcome, Replied) and outcome.message.get("type") == WARMING:
            self.warming = True
            left = deadline - time.monotonic()
            outcome = self._receive(left if warm_up_s is None else min(left, warm_up_s), offset)
        return outcome

    def request(self, message: dict[str, Any], timeout_s: float) -> Outcome:
        """Send one request and wait up to ``timeout_s`` for its reply."""
        offset = self._log_size()
        self.arena.settle()  # what this side wrote is visible to the runner before it reads
        if not self._send(message):
            return self._crashed(offset)
        return self._receive(timeout_s, offset)

    def _receive(self, timeout_s: float, offset: int) -> Outcome:
        if self._pending:
            return Replied(self._pending.pop(0))
        deadline = time.monotonic() + max(timeout_s, 0.0)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                return TimedOut(timeout_s, self._log_tail(offset))
            ready, _, _ = select.select([self._reply_r], [], [], remaining)
            if not ready:
                continue
            data = os.read(self._reply_r, 1 << 16)
            if not data:
                return self._crashed(offset)
            try:
                frames = self._frames.feed(data)
            except ChannelError as exc:
                return self._crashed(offset, detail=f"malformed reply: {exc}")
            if frames:
                # one request, one reply: anything more was written by candidate code
                self._pending.extend(frames[1:])
                return Replied(frames[0])

    def _crashed(self, offset: int, detail: str = "") -> Crashed:
        returncode: int | None = None
        if not detail:
            try:
                returncode = self.process.wait(timeout=_REAP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        return Crashed(returncode, self._log_tail(offset), detail)

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def _log_tail(self, offset: int) -> str:
        """The end of what the runner logged since ``offset`` (see ``log_tail``)."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(max(offset, self._log_size() - LOG_SCAN_CHARS))
                text = log.read().decode(errors="replace")
        except OSError:
            return ""
        return log_tail(text)

    def stage(self, artifact: Path) -> str:
        """A copy of ``artifact`` in the runner's scratch folder, the one folder it still sees
        once isolated (its /tmp is private, where a compile cache may live); the path to load."""
        copy = self.scratch / artifact.name  # a Python extension must keep its module name
        shutil.copyfile(artifact, copy)
        return str(copy)

    def stage_tree(self, folder: Path, name: str) -> str:
        """A copy of ``folder``'s plain files (two levels down, links not followed) as
        ``name`` in the runner's scratch folder; the path of the copy."""
        target = self.scratch / name
        copy_tree(folder, target)
        return str(target)

    def cpu_seconds(self) -> float:
        """CPU time the runner's process group has used so far (all threads, nanosecond
        resolution from the kernel's schedstat): what the candidate cannot forge and what its
        share of a loaded machine does not inflate. NaN where /proc does not tell."""
        try:
            group = os.getpgid(self.process.pid)
        except OSError:
            return math.nan
        total = 0
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()
                if int(fields[2]) != group:
                    continue
                for task in os.scandir(f"/proc/{entry.name}/task"):
                    with open(f"{task.path}/schedstat", "rb") as sched:
                        total += int(sched.read().split()[0])
            except (OSError, IndexError, ValueError):
                continue  # a process or thread that ended meanwhile
        return total / 1e9

    def kill(self) -> None:
        """Kill the runner's whole process group and release the pipes (the log stays).

        A group that survives SIGKILL (a process stuck in the kernel) is recorded in
        ``unkillable``; the judge reports it with the verdict.
        """
        if self._closed:
            return
        self._closed = True
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        except PermissionError as exc:
            self.unkillable = f"the runner's process group could not be killed: {exc}"
        try:
            self.process.wait(timeout=_KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            self.unkillable = (f"runner {self.process.pid} was still alive {_KILL_WAIT_S:g} s "
                               f"after SIGKILL")
        for fd in (self._request_w, self._reply_r):
            os.close(fd)

    def close(self) -> None:
        """Kill the runner (it serves one candidate: nothing to ask it first), close the arena
        and delete the scratch folder."""
        self.kill()
        self.arena.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


def fault_text(message: dict[str, Any], limit: int = LOG_TAIL_CHARS) -> str:
    """What a ``fault`` reply says, for a person: the exception and its text (CUDA's reading of
    it where there is one), then the end of its traceback."""
    error = str(message.get("error") or "an error")
    text = str(message.get("message") or "")
    head = f"{error}: {text}" if text else error
    cuda = message.get("cuda")
    if isinstance(cuda, str) and cuda:
        head += f" ({' '.join(cuda.replace('{where}', '').split())})"
    trace = message.get("traceback")
    if isinstance(trace, str) and trace:
        return f"{head}\n{log_tail(trace, limit)}"
    return head


def raise_fault(message: dict[str, Any], what: str) -> None:
    """Raise the exception a fault reply of a runner without candidate code stands for."""
    if message.get("task_error"):
        raise TaskError(str(message["task_error"]))
    raise SandboxError(f"{what}: {fault_text(message)}")


def log_tail(text: str, limit: int = LOG_TAIL_CHARS) -> str:
    """The part of a runner's log worth quoting: at most about ``limit`` characters of its end.

    A crash report starts at faulthandler's "Fatal Python error" line, which names the signal;
    that line is kept even when the stack below it is longer than the limit.
    """
    # faulthandler's list of loaded extension modules says nothing about the kernel
    lines = [line for line in text.splitlines() if not line.startswith("Extension modules:")]
    fatal = [i for i, line in enumerate(lines) if line.startswith("Fatal Python error")]
    head: list[str] = []
    if fatal:
        head, lines = lines[fatal[-1]:fatal[-1] + 1], lines[fatal[-1] + 1:]
    budget = limit - sum(len(line) + 1 for line in head)
    tail: list[str] = []
    for line in reversed(lines):
        if len(line) + 1 > budget:
            tail.append("...")
            break
        tail.append(line)
        budget -= len(line) + 1
    return "\n".join(head + tail[::-1]).strip()
