"""The parent side of the sandbox: spawn the worker, talk to it, enforce time, bury it.

One ``Sandbox`` is one worker process (evaluators/sandbox_worker.py), started with
``subprocess.Popen`` in a new session (its own process group, so that a kill reaches anything it
started), never by forking this process. It gets a fresh scratch folder as working directory,
the scrubbed environment (evaluators/environment.py) and two pipes passed by descriptor number:
requests in, replies out. Its stdout and stderr go to ``worker.log`` in the scratch folder, whose
tail is quoted when it dies.

``request`` returns an outcome, never raises for what the candidate did: ``Replied`` (a result or
a fault), ``Crashed`` (the channel hit end of file or carried garbage) or ``TimedOut``. After a
crash or a timeout the process is gone; the owner starts a new ``Sandbox`` for the next candidate.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..search.task import TaskError
from .channel import ChannelError, FrameBuffer, write_frame
from .environment import scrubbed_environment

WORKER_MODULE = "kernelswarm.evaluators.sandbox_worker"
LOG_TAIL_CHARS = 1500
LOG_SCAN_CHARS = 64 * 1024  # how far back a crash report's first line is looked for
_REAP_TIMEOUT_S = 5.0

# Kernels are single-threaded; keep the libraries under torch from starting thread pools too.
_SANDBOX_VARIABLES = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                      "OPENBLAS_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


class SandboxError(RuntimeError):
    """The sandbox could not start or reported a fault that is not the candidate's."""


# Phases the worker reports progress in: "correctness", "held-out", "timing", and this one, the
# re-check of the starting kernel after each candidate.
HEALTH_CHECK = "health check"


@dataclass(frozen=True)
class Progress:
    """What the sandbox said it was doing last: a phase and a shape label."""

    phase: str
    shape: str


def raise_fault(message: dict[str, Any], what: str) -> None:
    """Raise the exception a fault reply stands for: ``TaskError`` or ``SandboxError``."""
    if message.get("task_error"):
        raise TaskError(str(message["task_error"]))
    raise SandboxError(f"{what}:\n{message.get('error')}")


@dataclass(frozen=True)
class Replied:
    message: dict[str, Any]


@dataclass(frozen=True)
class Crashed:
    returncode: int | None  # negative: killed by that signal; None: alive but channel unusable
    progress: Progress | None
    log_tail: str
    detail: str = ""  # set when the channel carried a malformed frame


@dataclass(frozen=True)
class TimedOut:
    limit_s: float
    progress: Progress | None
    log_tail: str


Outcome = Replied | Crashed | TimedOut


def _python_path() -> str:
    """This process's import path, so that the worker imports the same kernelswarm."""
    entries = [os.path.abspath(p or os.getcwd()) for p in sys.path]
    return os.pathsep.join(dict.fromkeys(p for p in entries if os.path.isdir(p)))


class Sandbox:
    """One live worker process and its channel."""

    def __init__(self, memory_limit_mb: int | None = None) -> None:
        self.scratch = Path(tempfile.mkdtemp(prefix="kernelswarm-sandbox-"))
        self.log_path = self.scratch / "worker.log"
        request_r, self._request_w = os.pipe()
        self._reply_r, reply_w = os.pipe()
        argv = [sys.executable, "-m", WORKER_MODULE, "--request-fd", str(request_r),
                "--reply-fd", str(reply_w)]
        if memory_limit_mb is not None:
            argv += ["--memory-limit-mb", str(memory_limit_mb)]
        env = scrubbed_environment(extra={**_SANDBOX_VARIABLES, "PYTHONPATH": _python_path()})
        try:
            with open(self.log_path, "wb") as log:
                self.process = subprocess.Popen(
                    argv, cwd=self.scratch, env=env, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, pass_fds=(request_r, reply_w),
                    start_new_session=True)
        except BaseException:
            os.close(self._request_w)
            os.close(self._reply_r)
            shutil.rmtree(self.scratch, ignore_errors=True)
            raise
        finally:
            os.close(request_r)  # the worker's ends; keeping them would hide its death from us
            os.close(reply_w)
        self._frames = FrameBuffer()
        self._closed = False

    @property
    def alive(self) -> bool:
        return not self._closed and self.process.poll() is None

    def start(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send the start request; return the ready message or raise ``SandboxError`` (or
        ``TaskError`` when the task's starting kernel fails its own checks)."""
        outcome = self.request(message, timeout_s)
        if isinstance(outcome, Replied) and outcome.message.get("type") == "ready":
            return outcome.message
        if isinstance(outcome, Replied):
            self.kill()
            raise_fault(outcome.message, "the sandbox failed to start")
        what = ("did not get ready within "
                f"{timeout_s:g} s" if isinstance(outcome, TimedOut) else "died while starting")
        raise SandboxError(f"the sandbox {what}; its log ends with:\n{outcome.log_tail}")

    def request(self, message: dict[str, Any], timeout_s: float) -> Outcome:
        """Send one request and wait up to ``timeout_s`` for its reply."""
        offset = self._log_size()
        progress: Progress | None = None
        try:
            write_frame(self._request_w, message)
        except (BrokenPipeError, OSError):
            return self._crashed(progress, offset)
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                return TimedOut(timeout_s, progress, self._log_tail(offset))
            ready, _, _ = select.select([self._reply_r], [], [], remaining)
            if not ready:
                continue
            data = os.read(self._reply_r, 1 << 16)
            if not data:
                return self._crashed(progress, offset)
            try:
                frames = self._frames.feed(data)
            except ChannelError as exc:
                return self._crashed(progress, offset, detail=f"malformed reply: {exc}")
            for frame in frames:
                if frame.get("type") == "progress":
                    progress = Progress(str(frame.get("phase", "")), str(frame.get("shape", "")))
                else:
                    return Replied(frame)

    def _crashed(self, progress: Progress | None, offset: int, detail: str = "") -> Crashed:
        returncode: int | None = None
        if not detail:
            try:
                returncode = self.process.wait(timeout=_REAP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        return Crashed(returncode, progress, self._log_tail(offset), detail)

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def _log_tail(self, offset: int) -> str:
        """The end of what the worker logged since ``offset`` (see ``log_tail``)."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(max(offset, self._log_size() - LOG_SCAN_CHARS))
                text = log.read().decode(errors="replace")
        except OSError:
            return ""
        return log_tail(text)

    def kill(self) -> None:
        """Kill the worker's whole process group and release the pipes (the log stays)."""
        if self._closed:
            return
        self._closed = True
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()
        for fd in (self._request_w, self._reply_r):
            os.close(fd)

    def close(self) -> None:
        """Ask the worker to exit, kill it if it does not, and delete the scratch folder."""
        if not self._closed:
            try:
                write_frame(self._request_w, {"type": "exit"})
                self.process.wait(timeout=2.0)
            except (OSError, subprocess.TimeoutExpired):
                pass
            self.kill()
        shutil.rmtree(self.scratch, ignore_errors=True)


def log_tail(text: str, limit: int = LOG_TAIL_CHARS) -> str:
    """The part of a worker's log worth quoting: at most about ``limit`` characters of its end.

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
