"""Timing one shape inside the runner: the candidate and the starting kernel, interleaved.

Each kernel works on copies of the problem of its own (``protocol.CPU_TIMING_COPIES`` on the
CPU; on a GPU as many as ``gpu_timing.plan_copies`` asks for). Before each sample, untimed, the
inputs of the copy about to be used are refreshed in place with ``make_inputs`` at the seed
``protocol.timing_seed(secret, index)``: no two timed calls see the same values, so remembering
an earlier answer does not pay, and the judge can re-derive any copy's inputs from its refresh
index. The outputs are poisoned before each sample too; the judge checks a sample of copies
after timing (``recheck``).

Requests per shape: ``warm`` (warm-up calls and, on a GPU, the choice between events and graph
replays, with the graphs captured), ``batch`` (the timed rounds, stopping rule of
evaluators/timing.py; the copies used last go back to the arena), then a few ``burst`` (refresh
the first copies from a seed that comes with the request, call the candidate on each of them
back to back, or not at all when ``null``, and return them): the judge times each burst itself,
and the times the batch reported must agree with the bursts' time.

GPU graph mode: a replay's calls rotate over the copies, and only the copy of a replay's last
call is refreshed before it (refreshing every copy before every replay would dominate the run);
host code does not run during a replay, so only a kernel remembering answers on the device
could profit from the other copies, and it would have to read its inputs to do so.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from ...search.task import Shape
from ..correctness import poison
from ..gpu_timing import Flusher, capture_graphs, event_sample, graph_sample, plan_copies, warm_up
from ..protocol import (
    CANDIDATE,
    CPU_TIMING_COPIES,
    FIRST_POISON,
    KERNELS,
    START,
    TensorSpec,
    timing_seed,
)
from ..timing import summarize
from .integrity import replaced_timers
from .session import Session


def _nbytes(tensors: tuple) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


class ShapeTiming:
    """The timed copies of one shape and the state of its measurement."""

    def __init__(self, session: Session, shape: Shape, secret: int) -> None:
        self.session = session
        self.shape = shape
        self.params = dict(shape)
        self.secret = secret
        self.index = 0
        module, device = session.task.module, session.device
        first = tuple(module.make_inputs(self.params, timing_seed(secret, 0), device))
        outputs = tuple(module.make_outputs(self.params, device))
        if session.on_gpu:
            self.copy_plan = plan_copies(_nbytes(first) + _nbytes(outputs), session.cache_bytes)
            self.copies = self.copy_plan.copies
        else:
            self.copies = CPU_TIMING_COPIES
        self.inputs = {k: [tuple(t.clone() for t in first) for _ in range(self.copies)]
                       for k in KERNELS}
        self.outputs = {k: [tuple(module.make_outputs(self.params, device))
                            for _ in range(self.copies)] for k in KERNELS}
        self.refreshed: dict[str, dict[int, int]] = {k: {} for k in KERNELS}
        for kernel in KERNELS:
            for copy in range(self.copies):
                self.refresh(kernel, copy)
        self.mode, self.calls_per_sample, self.graphs = "cpu", 1, list[object]()
        self.flush = Flusher(session.flusher)

    def refresh(self, kernel: str, copy: int, secret: int | None = None) -> None:
        """New values in ``copy``'s input tensors (same storage), and its outputs poisoned."""
        fresh = self.session.task.module.make_inputs(
            self.params, timing_seed(self.secret if secret is None else secret, self.index),
            self.session.device)
        for tensor, value in zip(self.inputs[kernel][copy], fresh, strict=True):
            tensor.copy_(value)
        poison(self.outputs[kernel][copy], FIRST_POISON)
        self.refreshed[kernel][copy] = self.index
        self.index += 1

    def _call(self, kernel: str) -> Callable[[int], None]:
        def call(copy: int) -> None:
            self.session.launch(kernel, self.inputs[kernel][copy], self.outputs[kernel][copy],
                                self.shape)
        return call

    # -- requests ------------------------------------------------------------------------------

    def warm(self) -> dict[str, Any]:
        calls = [self._call(k) for k in KERNELS]
        if not self.session.on_gpu:
            for call in calls:
                for _ in range(self.session.settings.warmup):
                    call(0)
            self.session.synchronize()
        else:
            estimates = warm_up(calls, self.copies, self.session.settings.warmup, self.flush)
            if max(estimates) < self.session.settings.cuda_graph_below_us:
                self.calls_per_sample, self.graphs = capture_graphs(
                    calls, self.copy_plan, max(estimates), self.flush)
            self.mode = "graph" if self.graphs else "events"
        return {"type": "warm", "mode": self.mode, "copies": self.copies,
                "calls_per_sample": self.calls_per_sample}

    def _sample(self, kernel: int, round_: int) -> int:
        """One untimed refresh and flush, then one timed sample (ns) of ``KERNELS[kernel]``."""
        name = KERNELS[kernel]
        if self.graphs:
            copy = (self.calls_per_sample - 1) % self.copies
            self.refresh(name, copy)
            return graph_sample(self.graphs[kernel], self.calls_per_sample, self.flush)
        copy = round_ % self.copies
        self.refresh(name, copy)
        if self.session.on_gpu:
            return event_sample(self._call(name), copy, self.flush)
        self.flush()
        self.session.synchronize()
        begin = time.perf_counter_ns()
        self._call(name)(copy)
        self.session.synchronize()
        return time.perf_counter_ns() - begin

    def batch(self, message: Mapping[str, Any]) -> dict[str, Any]:
        """The timed rounds; the copies used last go back to the arena before the reply."""
        plan = self.session.plan
        samples: list[list[int]] = [[] for _ in KERNELS]
        started = time.perf_counter()
        rounds = 0
        for round_ in range(plan.max_repeats):
            for position in range(len(KERNELS)):
                kernel = (position + round_) % len(KERNELS)
                samples[kernel].append(self._sample(kernel, round_))
            rounds = round_ + 1
            if rounds >= plan.min_repeats:
                lead = summarize(samples[0])
                if lead.rel_se <= plan.target_rel_se or \
                        time.perf_counter() - started >= plan.budget_s:
                    break
        self.session.synchronize()
        written = self._write_back(message["slots"], self._used_last(rounds))
        return {"type": "batch", "rounds": rounds, "samples": samples, "written": written,
                "problem": replaced_timers() or self.session.tampering(),
                "refreshed": self._refreshed(written)}

    def burst(self, message: Mapping[str, Any]) -> dict[str, Any]:
        """The candidate's first copies refreshed from the burst's own seed (sent with this
        request, so no output can be ready before it), the candidate on each back to back (none
        when ``null``), synchronised, and the copies back to the arena: the judge times this
        whole request."""
        kernel = START if message.get("kernel") == START else CANDIDATE
        copies = list(range(min(len(message["slots"]), self.copies)))
        for copy in copies:
            self.refresh(kernel, copy, int(message["seed"]))
        self.session.synchronize()
        if not message.get("null"):
            for copy in copies:
                self._call(kernel)(copy)
        self.session.synchronize()
        written = self._write_back(message["slots"], copies, kernel)
        return {"type": "burst", "written": written,
                "refreshed": {str(c): self.refreshed[kernel][c] for c in written}}

    def _refreshed(self, copies: list[int]) -> dict[str, int]:
        return {str(c): self.refreshed[CANDIDATE][c] for c in copies}

    def _used_last(self, rounds: int) -> list[int]:
        """The candidate's copies whose last output is the latest, most recent first."""
        if self.graphs:
            return [(self.calls_per_sample - 1) % self.copies]
        return [r % self.copies for r in range(rounds - 1, max(rounds - self.copies, 0) - 1, -1)]

    def _write_back(self, slots: list[Mapping[str, Any]], copies: list[int],
                    kernel: str = CANDIDATE) -> list[int]:
        """The last outputs and the inputs of ``copies``, one per slot of the arena."""
        written = []
        for slot, copy in zip(slots, copies, strict=False):
            self.session.write_back(
                self.outputs[kernel][copy], [TensorSpec.of_json(s) for s in slot["outputs"]],
                self.inputs[kernel][copy], [TensorSpec.of_json(s) for s in slot["inputs"]])
            written.append(copy)
        return written
