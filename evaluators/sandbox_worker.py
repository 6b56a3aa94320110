"""The sandbox process: ``python -m kernelswarm.evaluators.sandbox_worker``.

Started only by ``Sandbox`` (evaluators/sandbox.py), in its own session and scratch folder, with a
scrubbed environment. It reads requests and writes replies as JSON frames on two inherited pipe
descriptors (never stdout, which goes to a log file with stderr). Protocol:

1. parent -> ``{"type": "start", task, language, settings, start: {artifact, entry, spec}}``;
   the worker loads the task and the starting kernel, checks that kernel, measures the machine
   and the PyTorch reference, and replies ``{"type": "ready", machine, eager_us}``.
2. parent -> ``{"type": "evaluate", artifact, entry, spec}``; the worker sends
   ``{"type": "progress", phase, shape}`` before each shape of each phase, then one
   ``{"type": "result", status, message, shapes, metrics, healthy}``; ``healthy`` is False when
   the starting kernel no longer passes after the candidate ran (the parent then replaces the
   process).
3. parent -> ``{"type": "exit"}`` or end of file: the worker exits.

Anything that is not the candidate's fault is answered with ``{"type": "fault", "error":
traceback}``, plus ``task_error`` (the message) when the task is broken, e.g. its starting kernel
fails its own checks.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import resource
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from ..search.evaluation import Status
from ..search.task import TaskError, load_task
from .channel import read_frame, write_frame
from .cuda_errors import classify
from .languages import LoadError, get_language
from .machine import device_cache_bytes, measure_machine
from .settings import EvaluatorSettings
from .timing import CacheFlusher

# torch (and run_phase, which imports it) are imported inside Worker methods: only after main()
# has put the resource limits in place.

FILE_SIZE_LIMIT_BYTES = 64 * 1024 * 1024  # the log is the only file the sandbox writes


def apply_limits(memory_limit_mb: int | None) -> None:
    """No core dumps, bounded file writes, and an address-space cap when one is configured.

    Applied first thing in ``main``: before torch, the task or any kernel is loaded.
    """
    limits = [(resource.RLIMIT_CORE, 0), (resource.RLIMIT_FSIZE, FILE_SIZE_LIMIT_BYTES)]
    if memory_limit_mb is not None:
        limits.append((resource.RLIMIT_AS, memory_limit_mb * 1024 * 1024))
    for kind, value in limits:
        _, hard = resource.getrlimit(kind)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(kind, (value, value))


def exit_with_parent(poll_s: float = 1.0) -> None:
    """Exit when the evaluator that started this process is gone.

    An idle worker notices the end of its request pipe, but one stuck in a kernel's endless loop
    would not; a daemon thread checks the parent id (it runs while the kernel does, since ctypes
    releases the GIL during the call).
    """
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(3)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kernelswarm.evaluators.sandbox_worker")
    parser.add_argument("--request-fd", type=int, required=True)
    parser.add_argument("--reply-fd", type=int, required=True)
    parser.add_argument("--memory-limit-mb", type=int, default=None)
    return parser.parse_args(argv)


class Worker:
    """The loaded task and baseline, serving evaluate requests until told to exit."""

    def __init__(self, request_fd: int, reply_fd: int) -> None:
        self.request_fd = request_fd
        self.reply_fd = reply_fd
        self.context: Any = None

    def send(self, message: dict[str, Any]) -> None:
        write_frame(self.reply_fd, message)

    def start(self, message: dict[str, Any]) -> dict[str, Any]:
        import torch

        from .run_phase import SandboxContext, check_baseline

        # Candidates may not start threads, so the references they are compared with (eager
        # PyTorch, the machine's bandwidth and flops) are measured on one core as well.
        torch.set_num_threads(1)
        settings = EvaluatorSettings(**message["settings"])
        task = load_task(message["task"], settings.device.split(":")[0])
        language = get_language(message["language"], settings)
        os.environ.update(language.sandbox_environment())  # e.g. TRITON_INTERPRET=1 on CPU
        baseline = message["start"]
        start = language.load(Path(baseline["artifact"]), baseline["entry"], baseline["spec"])
        llc = device_cache_bytes(settings.device)
        machine = measure_machine(settings.device, llc)
        flusher = CacheFlusher(2 * llc, settings.device) if settings.flush_cache else None
        self.context = SandboxContext(task=task, language=language, settings=settings,
                                      start=start, flusher=flusher, progress=self.progress,
                                      cache_bytes=llc)
        self.context.measure_eager()
        if self.context.on_gpu and settings.profile_kernels:
            from .gpu_phase import profile_candidate

            profile_candidate(self.context, start)  # pays the profiler's start-up once, here
        # Last: it snapshots the process for the integrity checks, so the lazy imports of the
        # steps above (a profiler session imports torch._dynamo, which wraps
        # torch.manual_seed) must already have happened.
        check_baseline(self.context)
        return {"type": "ready", "machine": machine.as_metrics(),
                "eager_us": {k: v.median_us for k, v in self.context.eager.items()},
                "flush_bytes": flusher.nbytes if flusher else 0,
                "dropped_checks": dict(self.context.dropped_checks)}

    def progress(self, phase: str, shape: Any) -> None:
        self.send({"type": "progress", "phase": phase, "shape": shape.label})

    def evaluate(self, message: dict[str, Any]) -> dict[str, Any]:
        from .run_phase import CandidateFault, fault_message, run_candidate, sandbox_is_healthy

        ctx = self.context
        try:
            kernel = ctx.language.load(Path(message["artifact"]), message["entry"],
                                       message["spec"])
        except LoadError as exc:
            reply = {"type": "result", "status": Status.RUNTIME_ERROR.value,
                     "message": str(exc), "shapes": [], "metrics": {}}
        else:
            try:
                reply = run_candidate(ctx, kernel, message)
            except CandidateFault as fault:
                reply = fault_message(fault)
                if fault.sticky:  # the CUDA context is gone: no health check can pass in it
                    return {**reply, "healthy": False}
            except Exception as exc:
                # A CUDA error surfacing outside the candidate's call (in a check that ran
                # after it) is still the candidate's; anything else is a fault of ours.
                failure = classify(exc)
                if failure is None:
                    raise
                return {"type": "result", "status": Status.RUNTIME_ERROR.value,
                        "message": failure.describe("after the kernel ran"), "shapes": [],
                        "metrics": {}, "healthy": False}
            finally:
                ctx.language.unload(kernel)
        return {**reply, "healthy": sandbox_is_healthy(ctx)}

    def serve(self) -> int:
        while True:
            message = read_frame(self.request_fd)
            if message is None or message.get("type") == "exit":
                return 0
            handler = {"start": self.start, "evaluate": self.evaluate}.get(message.get("type"))
            try:
                if handler is None:
                    raise ValueError(f"unknown request type {message.get('type')!r}")
                reply = handler(message)
            except TaskError as exc:
                reply = {"type": "fault", "task_error": str(exc), "error": traceback.format_exc()}
            except Exception:
                reply = {"type": "fault", "error": traceback.format_exc()}
            self.send(reply)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    apply_limits(args.memory_limit_mb)
    exit_with_parent()
    faulthandler.enable(all_threads=False)  # a crash leaves its Python stack in the quoted log
    return Worker(args.request_fd, args.reply_fd).serve()


if __name__ == "__main__":
    sys.exit(main())
