"""The judge's side of the runner template (evaluators/runner/template.py): one template process
per judge process, started on the first runner and kept while the runners' environment stays
the same; ``RunnerProcess`` asks it for each runner and falls back to starting the runner as an
interpreter of its own (``python -m kernelswarm.evaluators.runner`` through ``unshare``) where
there is no template: not Linux, a template that could not start or could not enter the
namespaces, or ``KERNELSWARM_RUNNER_TEMPLATE=0``.

On a GPU too: a runner forked from it initialises CUDA after the fork, which is sound since the
template never touches the device (it refuses to start if torch made a context). On an H200 a
forked runner cut an evaluation of silu_and_mul from 6.0 s to 2.4 s.

A spawned runner is handed back as a ``TemplateChild``, which answers ``pid``, ``poll`` and
``wait`` as ``subprocess.Popen`` does: its exit status comes from the template, which is its
parent. Thread-safe: one lock guards the socket.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

TEMPLATE_MODULE = "kernelswarm.evaluators.runner.template"
# "0": every runner is an interpreter of its own
SWITCH_ENV = "KERNELSWARM_RUNNER_TEMPLATE"
START_TIMEOUT_S = 180.0  # importing torch on a loaded machine
SPAWN_TIMEOUT_S = 30.0
_MESSAGE_BYTES = 1 << 16


class TemplateUnavailable(RuntimeError):
    """The template could not start, could not enter the namespaces, or stopped answering."""


class RunnerTemplate:
    """One live template process and its control socket."""

    def __init__(self, env: Mapping[str, str], namespaces: Sequence[str]) -> None:
        self.env = dict(env)
        self.requested = tuple(namespaces)
        self._lock = threading.RLock()
        self._exits: dict[int, int] = {}
        self._live: set[int] = set()  # spawned, no exit reported yet
        self._replies: list[dict[str, Any]] = []
        self._gone = False
        self._next_id = 0
        # Its log is a file without a name (read through this descriptor), and its working
        # folder, empty, only serves its start (``python -m`` imports from there): nothing of it
        # is left behind however this process ends, killed by Ray included.
        self._log = tempfile.TemporaryFile(prefix="kernelswarm-template-")
        self._folder = Path(tempfile.mkdtemp(prefix="kernelswarm-template-"))
        self._socket, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", TEMPLATE_MODULE, "--control-fd", str(theirs.fileno()),
                 "--namespaces", ",".join(self.requested)],
                env=self.env, cwd=self._folder, stdin=subprocess.DEVNULL, stdout=self._log,
                stderr=subprocess.STDOUT, pass_fds=(theirs.fileno(),),
                start_new_session=True)
        except BaseException:
            self._socket.close()
            self._remove_files()
            raise
        finally:
            theirs.close()
        ready = self._expect(lambda m: m.get("type") == "ready", START_TIMEOUT_S)
        if ready is None or ready.get("refused"):
            why = (ready or {}).get("refused") or self._log_tail() or "it did not answer"
            self.close()
            raise TemplateUnavailable(f"the runner template could not start: {why}")
        shutil.rmtree(self._folder, ignore_errors=True)  # it has imported all it needs
        self.namespaces: tuple[str, ...] = tuple(ready.get("namespaces") or ())

    @property
    def alive(self) -> bool:
        return not self._gone and self.process.poll() is None

    def spawn(self, fds: Sequence[int], scratch: Path, memory_limit_mb: int | None,
              marker: str) -> TemplateChild:
        """A runner forked with ``fds`` (request read end, reply write end, arena, log) in
        ``scratch``; ``marker`` tells it the namespaces it got (evaluators/sandbox/isolation.py)."""
        with self._lock:
            self._next_id += 1
            number = self._next_id
            request = {"type": "spawn", "id": number, "scratch": str(scratch),
                       "memory_limit_mb": memory_limit_mb, "marker": marker}
            try:
                socket.send_fds(self._socket, [json.dumps(request).encode()], list(fds))
            except OSError as exc:
                self._gone = True
                raise TemplateUnavailable(f"the runner template is gone: {exc}") from None
            reply = self._expect(lambda m: m.get("type") == "spawned" and m.get("id") == number,
                                 SPAWN_TIMEOUT_S)
            if reply is None or "pid" not in reply:
                raise TemplateUnavailable(
                    f"the runner template did not spawn a runner: "
                    f"{(reply or {}).get('error') or 'no answer'}")
            self._live.add(int(reply["pid"]))
        return TemplateChild(self, int(reply["pid"]))

    def idle(self) -> bool:
        """Whether every runner it spawned has ended (so that closing it kills none)."""
        with self._lock:
            while not self._gone and select.select([self._socket], [], [], 0)[0]:
                self._read(0)
            return not self._live

    def returncode(self, pid: int, timeout_s: float | None) -> int | None:
        """``pid``'s exit status once the template reports it (waiting up to ``timeout_s``;
        None waits as long as it takes); None while it runs. A child of a template that is gone
        was killed with it."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._lock:
            while True:
                if pid in self._exits:
                    return self._exits.pop(pid)
                if self._gone:
                    return -signal.SIGKILL
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._read(left)

    def _read(self, timeout_s: float | None) -> None:
        """Read one message (exits are filed, other replies queued); marks a closed socket."""
        ready, _, _ = select.select([self._socket], [], [], timeout_s)
        if not ready:
            return
        try:
            data = self._socket.recv(_MESSAGE_BYTES)
        except OSError:
            data = b""
        if not data:
            self._gone = True
            return
        message = json.loads(data)
        if message.get("type") == "exited":
            self._exits[int(message["pid"])] = int(message["returncode"])
            self._live.discard(int(message["pid"]))
        else:
            self._replies.append(message)

    def _expect(self, wanted: Callable[[dict[str, Any]], bool],
                timeout_s: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while True:
                for message in self._replies:
                    if wanted(message):
                        self._replies.remove(message)
                        return message
                left = deadline - time.monotonic()
                if self._gone or left <= 0:
                    return None
                self._read(left)

    def _log_tail(self) -> str:
        try:
            size = os.fstat(self._log.fileno()).st_size
            # pread: the template writes through the same open file, at its own offset
            tail = os.pread(self._log.fileno(), 1500, max(size - 1500, 0))
        except (OSError, ValueError):  # ValueError: the log was closed
            return ""
        return tail.decode(errors="replace").strip()

    def _remove_files(self) -> None:
        self._log.close()
        shutil.rmtree(self._folder, ignore_errors=True)

    def close(self) -> None:
        """End the template (closing its socket does: it kills what it spawned, then exits)."""
        with self._lock:
            self._gone = True
            self._socket.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self._remove_files()


class TemplateChild:
    """A runner forked by the template, seen as ``subprocess.Popen`` sees its children."""

    def __init__(self, template: RunnerTemplate, pid: int) -> None:
        self.template = template
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.template.returncode(self.pid, 0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self.template.returncode(self.pid, timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(f"runner {self.pid}", timeout or 0.0)
        return self.returncode


_templates: dict[tuple[frozenset[tuple[str, str]], tuple[str, ...]], RunnerTemplate] = {}
_refused = ""
_shared_lock = threading.Lock()


def runner_template(env: Mapping[str, str], namespaces: Sequence[str]) -> RunnerTemplate | None:
    """This process's template for runners of environment ``env`` in ``namespaces``, started on
    first use (and again if it died); None where runners are to be started as interpreters of
    their own (see the module's docstring; ``template_refusal`` says why). A template of another
    environment (the judge's changed since) is closed once its runners have all ended."""
    global _refused
    if not sys.platform.startswith("linux"):
        return None
    key = (frozenset(env.items()), tuple(namespaces))
    with _shared_lock:
        if _refused:
            return None
        for other, template in list(_templates.items()):
            if not template.alive or (other != key and template.idle()):
                template.close()
                del _templates[other]
        if key in _templates:
            return _templates[key]
        try:
            _templates[key] = RunnerTemplate(env, namespaces)
        except (TemplateUnavailable, OSError) as exc:
            _refused = str(exc)
            return None
        return _templates[key]


def template_wanted(device: str) -> bool:
    """Whether runners for ``device`` are to be forked from the template: unless
    ``KERNELSWARM_RUNNER_TEMPLATE=0`` (the device does not matter: the template never touches
    one)."""
    return os.environ.get(SWITCH_ENV, "") != "0"


def template_refusal() -> str:
    """Why this process starts runners without a template ("" when it has one or never tried)."""
    if os.environ.get(SWITCH_ENV) == "0":
        return f"{SWITCH_ENV}=0"
    if not sys.platform.startswith("linux"):
        return f"no runner template on {sys.platform}"
    return _refused
