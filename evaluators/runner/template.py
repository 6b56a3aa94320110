"""The runner template: a process that has imported what a runner imports (Python, torch, the
runner's modules) and forks a runner for each request, so that a runner starts in milliseconds
instead of the seconds an interpreter and torch take (on a 2-core machine that start-up was most
of the CPU an evaluation cost).

    python -m kernelswarm.evaluators.runner.template --control-fd N --namespaces pid,net,ipc,mount

The judge (evaluators/judge/runner_template.py) starts it with the runners' scrubbed environment
and talks to it over a Unix SEQPACKET socket, one JSON message a packet:

- template -> judge ``ready`` {pid, namespaces, refused}: the namespaces its runners get (probed
  once, by forking a child that enters them), or why none.
- judge -> template ``spawn`` {id, scratch, memory_limit_mb, marker}, with four descriptors
  attached: the request pipe's read end, the reply pipe's write end, the arena, the log.
- template -> judge ``spawned`` {id, pid} (or {id, error}), then ``exited`` {pid, returncode} when
  that process ends (``returncode`` as ``subprocess`` gives it: negative for a signal).

What the template guarantees, and why the verdicts do not move:

- It never runs candidate code and never touches a GPU: it imports, then only forks (a CUDA
  context does not survive a fork, so it refuses to start if torch initialised one). It is a
  clean copy for every runner: nothing a candidate does in its runner reaches the template or
  the next runner (copy-on-write memory; the runner closes the control socket at once).
- Each spawned process is what ``unshare --pid --net --ipc --mount --fork --kill-child
  --mount-proc`` made before: its own session (the judge kills its process group), new network,
  IPC and mount namespaces, and its child, the runner proper, pid 1 of a new PID namespace with
  its own /proc. That process then does what ``python -m kernelswarm.evaluators.runner`` does
  (limits, tie to the judge, the request loop); the runner's own isolation
  (evaluators/sandbox/isolation.py ``enter_isolation``) is unchanged.
- Spawned processes end with the template (parent-death signal), and the template ends when the
  judge closes its socket, killing what it spawned first.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import resource
import select
import signal
import socket
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from ..sandbox import namespaces
from ..sandbox.isolation import ISOLATION_ENV
from .limits import apply_limits, exit_with_parent
from .serve import serve  # torch and every module a runner imports before its first request

MESSAGE_BYTES = 1 << 16
FDS_PER_SPAWN = 4  # request read end, reply write end, arena, log


def send(control: socket.socket, message: dict[str, Any]) -> None:
    control.send(json.dumps(message).encode())


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def _run_runner(fds: Sequence[int], request: dict[str, Any]) -> None:
    """Be the runner (``python -m kernelswarm.evaluators.runner``), then exit; never returns."""
    request_fd, reply_fd, arena_fd = fds[:3]
    code = 1
    try:
        if request.get("marker"):
            os.environ[ISOLATION_ENV] = request["marker"]
        apply_limits(request.get("memory_limit_mb"))
        exit_with_parent(request_fd)
        faulthandler.enable(all_threads=False)
        code = serve(request_fd, reply_fd, arena_fd)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - the runner's log is where a person reads it
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _become_runner(control: socket.socket, wake: Sequence[int], fds: Sequence[int],
                   request: dict[str, Any], names: Sequence[str], told: int) -> None:
    """In the forked child: a session of its own (then ``told`` is closed, which the template
    waits for), the log as stdout and stderr, only its own descriptors, the namespaces; then
    the runner (in a grandchild, pid 1 of the new PID namespace, when there is one). Never
    returns."""
    try:
        os.setsid()
        os.close(told)
        namespaces.die_with_parent()
        for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        control.close()
        for fd in wake:
            os.close(fd)
        log = fds[3]
        os.dup2(log, 1)
        os.dup2(log, 2)
        keep = {0, 1, 2, *fds[:3]}
        for name in os.listdir("/proc/self/fd"):
            if int(name) not in keep:
                try:
                    os.close(int(name))
                except OSError:
                    pass  # the listing's own descriptor
        os.chdir(request["scratch"])
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if names:
            namespaces.enter(names)
        if "pid" in names:
            child = os.fork()
            if child == 0:
                namespaces.inside_pid_namespace(own_proc="mount" in names)
                _run_runner(fds, request)
            _, status = os.waitpid(child, 0)
            namespaces.exit_as(status)
        _run_runner(fds, request)
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(126)


def probe(names: Sequence[str]) -> str:
    """Why a forked child cannot enter ``names`` here (and run pid 1 of a new PID namespace
    with its own /proc), or "" when it can."""
    if not names:
        return ""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read)
        try:
            namespaces.enter(names)
            if "pid" in names:
                grandchild = os.fork()
                if grandchild == 0:
                    namespaces.inside_pid_namespace(own_proc="mount" in names)
                    os._exit(0 if os.getpid() == 1 else 3)
                _, status = os.waitpid(grandchild, 0)
                if status != 0:
                    os.write(write, b"pid 1 of the new namespace failed to mount its /proc")
                namespaces.exit_as(status)
            os._exit(0)
        except BaseException as exc:  # noqa: BLE001
            os.write(write, str(exc).encode(errors="replace")[:500])
            os._exit(1)
    os.close(write)
    _, status = os.waitpid(child, 0)
    with os.fdopen(read, "rb") as reason:
        said = reason.read().decode(errors="replace")
    if status == 0:
        return ""
    return said or f"the probe ended with status {os.waitstatus_to_exitcode(status)}"


class Template:
    """The template's loop: spawn on request, report exits, end with the judge's socket."""

    def __init__(self, control: socket.socket, names: Sequence[str]) -> None:
        self.control = control
        self.names = list(names)
        self.children: set[int] = set()
        self.wake = os.pipe()
        os.set_blocking(self.wake[1], False)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # the wake-up pipe does the work
        signal.set_wakeup_fd(self.wake[1], warn_on_full_buffer=False)
        namespaces.adopt_orphans()  # a runner's own orphans are reaped here, not by init

    def spawn(self, request: dict[str, Any], fds: Sequence[int]) -> dict[str, Any]:
        if len(fds) != FDS_PER_SPAWN:
            return {"type": "spawned", "id": request.get("id"),
                    "error": f"{len(fds)} descriptors came with the request, not {FDS_PER_SPAWN}"}
        if _threads() != 1:  # a fork copies one thread: others' locks would stay taken
            return {"type": "spawned", "id": request.get("id"),
                    "error": f"the template has {_threads()} threads; it forks only with one"}
        # The reply waits for the child's own session: a kill of its process group must reach
        # it from the moment the judge knows its pid.
        in_session, told = os.pipe()
        try:
            pid = os.fork()
        except OSError as exc:  # out of processes or memory: the judge starts one without us
            os.close(in_session)
            os.close(told)
            return {"type": "spawned", "id": request.get("id"), "error": f"fork: {exc}"}
        if pid == 0:
            os.close(in_session)
            _become_runner(self.control, self.wake, fds, request, self.names, told)
        os.close(told)
        with os.fdopen(in_session, "rb") as session:
            session.read()  # end of file: the child is in its session (or died trying)
        self.children.add(pid)
        return {"type": "spawned", "id": request.get("id"), "pid": pid}

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in self.children:
                self.children.discard(pid)
                send(self.control, {"type": "exited", "pid": pid,
                                    "returncode": os.waitstatus_to_exitcode(status)})

    def serve(self) -> int:
        poller = select.poll()
        poller.register(self.control.fileno(), select.POLLIN)
        poller.register(self.wake[0], select.POLLIN)
        while True:
            events = dict(poller.poll())
            if self.wake[0] in events:
                os.read(self.wake[0], 4096)
            self.reap()
            if self.control.fileno() not in events:
                continue
            data, fds, _, _ = socket.recv_fds(self.control, MESSAGE_BYTES, FDS_PER_SPAWN + 4)
            if not data:  # the judge is gone: so is everything it asked for
                for pid in self.children:
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except OSError:
                        pass
                return 0
            try:
                request = json.loads(data)
                reply = (self.spawn(request, fds) if request.get("type") == "spawn" else
                         {"type": "error", "error": f"unknown request {request.get('type')!r}"})
            finally:
                for fd in fds:
                    os.close(fd)
            send(self.control, reply)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="kernelswarm.evaluators.runner.template")
    parser.add_argument("--control-fd", type=int, required=True)
    parser.add_argument("--namespaces", default="")
    args = parser.parse_args(argv)
    control = socket.socket(fileno=args.control_fd)
    names = [n for n in args.namespaces.split(",") if n]
    import torch

    if torch.cuda.is_initialized():
        send(control, {"type": "ready", "pid": os.getpid(), "namespaces": [],
                       "refused": "importing the runner initialised CUDA: it cannot be forked"})
        return 1
    refused = probe(names)
    template = Template(control, [] if refused else names)
    send(control, {"type": "ready", "pid": os.getpid(), "namespaces": template.names,
                   "refused": refused})
    if refused:
        return 1
    return template.serve()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
