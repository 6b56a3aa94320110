"""The runner's request loop: one frame in, one frame out, until ``exit`` or end of file.

Requests (JSON frames, evaluators/channel.py), in the order the judge sends them:

- ``prepare`` {task, language, settings, start}: torch, the task and the starting kernel;
  ``warming`` as the starting kernel's warm-up calls begin, then ``ready`` {cache_bytes,
  flush_bytes}. A spare runner stops here until it is needed.
- ``calibrate`` (only in a runner that never loads a candidate): the machine's figures;
  ``calibrated`` {machine}.
- ``load`` {artifact, entry, spec}: the OS isolation, then the candidate; ``loaded``
  {isolation}, or ``called`` with the load error.
- ``seal``: after the checks, the compile window of a JIT closes; ``sealed`` {leftover}.
- ``call`` {kernel, shape, inputs, outputs, poison, fresh, load}: one checked call;
  ``called`` {problem} or ``called`` {error, message[, cuda, sticky]}.
- ``time`` {shape, secret, step: warm | batch | burst, ...}: see evaluators/runner/timed.py.
- ``observe`` {shapes}: kernels one candidate call launches per shape (GPU).
- ``resources``: the language's view of the loaded candidate.

A failure that is not a call's (a bug, a broken task) is ``fault`` {error, message,
traceback[, cuda][, task_error]}; after
the candidate loaded, the judge takes any reply as the candidate's and trusts none of it.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ...search import Shape, TaskError
from ..channel import read_frame, write_frame
from ..languages import LoadError
from ..measure.machine import measure_machine
from ..measure.profiling import kernel_profile
from .session import CallFailed, Session, error_report, guarded
from .timed import ShapeTiming


class Runner:
    """Dispatches requests to the session; keeps the timing state of the shape being timed."""

    def __init__(self, arena_fd: int) -> None:
        self.session = Session(arena_fd)
        self.timing: ShapeTiming | None = None
        self.scratch = Path(os.getcwd())

    def handle(self, message: Mapping[str, Any]) -> dict[str, Any]:
        kind = message.get("type")
        s = self.session
        if kind == "prepare":
            return s.prepare(message)
        if kind == "calibrate":
            return self.calibrate()
        if kind == "load":
            try:
                return s.load(message, self.scratch)
            except LoadError as exc:
                return {"type": "called", "error": "LoadError", "message": str(exc)[:2000]}
        if kind == "seal":
            return s.seal()
        if kind == "call":
            return guarded(lambda: s.call(message))
        if kind == "time":
            return guarded(lambda: self.time(message))
        if kind == "observe":
            return guarded(lambda: self.observe(message))
        if kind == "resources":
            assert s.language is not None
            return {"type": "resources", "resources": s.language.resources(s.kernels["candidate"])}
        raise ValueError(f"unknown request type {kind!r}")

    def time(self, message: Mapping[str, Any]) -> dict[str, Any]:
        step = message.get("step")
        if step == "warm":
            # the previous shape's copies and the checks' buffers go first: on a problem of
            # several GB the device holds one shape's copies at a time
            self.timing = None
            began = time.perf_counter()
            released = self.session.release_buffers()
            spent = time.perf_counter() - began
            self.timing = ShapeTiming(self.session, Shape.of(message["shape"]),
                                      int(message["secret"]))
            if released:
                self.timing.seconds["release"] = spent
            return self.timing.warm()
        if self.timing is None:
            raise ValueError("a timing step before warm")
        if step == "batch":
            return self.timing.batch(message)
        if step == "burst":
            return self.timing.burst(message)
        raise ValueError(f"unknown timing step {step!r}")

    def observe(self, message: Mapping[str, Any]) -> dict[str, Any]:
        """Per shape, the kernels one call of the candidate launches (after a warm call)."""
        s = self.session
        found = {}
        for raw in message["shapes"]:
            shape = Shape.of(raw)
            inputs = tuple(s.task.module.make_inputs(dict(shape), 0, s.device))
            outputs = tuple(s.task.module.make_outputs(dict(shape), s.device))
            s.launch("candidate", inputs, outputs, shape)
            found[shape.label] = kernel_profile(
                lambda i=inputs, o=outputs, p=shape: s.launch("candidate", i, o, p))
        return {"type": "observed", "kernels": found}

    def calibrate(self) -> dict[str, Any]:
        """The machine's figures (copy bandwidth, matmul flops), measured by this runner, which
        has not loaded (and never will load) a candidate. Baselines are measured elsewhere
        (evaluators/baselines/baselines.py), never in a runner."""
        s = self.session
        return {"type": "calibrated", "machine": asdict(measure_machine(s.device, s.cache_bytes))}


def serve(request_fd: int, reply_fd: int, arena_fd: int) -> int:
    runner = Runner(arena_fd)
    runner.session.notify = lambda frame: write_frame(reply_fd, frame)
    while True:
        message = read_frame(request_fd)
        if message is None or message.get("type") == "exit":
            return 0
        try:
            reply = runner.handle(message)
        except TaskError as exc:
            reply = {"type": "fault", "task_error": str(exc), "error": "TaskError",
                     "traceback": traceback.format_exc()}
        except CallFailed as failed:
            reply = {"type": "called", **failed.report}
        except Exception as exc:
            report = error_report(exc)
            reply = {"type": "fault", **report, "traceback": traceback.format_exc()}
        runner.session.settle()  # the arena's copies are done before the judge reads them
        write_frame(reply_fd, reply)
