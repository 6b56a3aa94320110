"""Timing one shape inside the runner: the candidate and the starting kernel, interleaved.

Each kernel works on copies of the problem of its own (``protocol.CPU_TIMING_COPIES`` on the
CPU; on a GPU as many as ``gpu_timing.plan_copies`` asks for). Before each sample, untimed, the
inputs of the copy about to be used are refreshed in place with ``make_inputs`` at the seed
``protocol.timing_seed(secret, index)``: no two timed calls see the same values, so remembering
an earlier answer does not pay, and the judge can re-derive any copy's inputs from its refresh
index. The outputs are poisoned before each sample too; the judge checks a sample of copies
after timing (``recheck``). On a GPU the outputs of the copies the judge gets back are
fingerprinted (evaluators/correctness.py ``fingerprint``) as soon as the timed call has
returned, before the device-wide synchronize: the judge compares the fingerprints with the
outputs it reads, so work left running past the timed call (deferred work) is a rejection.

Requests per shape: ``warm`` (warm-up calls and, on a GPU, the choice between events and graph
replays, with the graphs captured), ``batch`` (the timed rounds, stopping rule of
evaluators/measure/timing.py; the copies used last go back to the arena), then a few ``burst`` (refresh
the first copies from a seed that comes with the request, call the candidate on each of them
back to back, or not at all when ``null``, and return them): the judge times each burst itself,
and the times the batch reported must agree with the bursts' time.

GPU graph mode: a replay's calls rotate over the copies. Before every replay, untimed, the copy
of its last call gets new inputs, and the outputs of *every* copy the replay uses are poisoned by
one more graph (multi-tensor kernels, replayed before the flush): no timed call finds its answer
already in its output buffer, so a kernel that skips work whose result is still there (a row
whose outputs are finite, or whose sampled inputs match what it saw at that address) computes
it. Drawing new inputs for every copy before every replay would dominate the run; the other
copies' inputs repeat from one replay to the next, so only a kernel keeping its own copy of
earlier answers on the device, keyed by sampled inputs, could save reading them. After the
batch the judge gets the copy of the last call and one other copy of the last replay, drawn
after it ran, and checks both. When made,
only the first ``DRAWN_COPIES`` copies of a kernel get a draw of their own; the others repeat
those draws in turn (``ShapeTiming._fill``): a graph of fast calls holds hundreds of copies,
and a draw per copy cost seconds an evaluation on a task of many shapes. The inputs a replay's
calls see repeat with that period, as they already repeat from one replay to the next.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ...search import Shape
from ..correctness import fingerprint, poison, poison_all
from ..measure.gpu_timing import (
    Flusher,
    capture_graphs,
    event_sample,
    graph_sample,
    plan_copies,
    warm_up,
)
from ..measure.timing import summarize
from ..protocol import (
    CANDIDATE,
    CPU_TIMING_COPIES,
    FIRST_POISON,
    KERNELS,
    START,
    TensorSpec,
    timing_seed,
)
from .integrity import replaced_timers
from .session import Session

# Copies made before the warm-up (it calls each kernel on a few); the graphs make the rest
WARM_COPIES = 4
# Copies of a kernel whose inputs are drawn with make_inputs when made; the others repeat them
DRAWN_COPIES = 8


def _nbytes(tensors: tuple) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _as_copy(first: tuple) -> tuple:
    """``first`` itself where it is laid out as ``torch.empty_like`` lays out the other copies
    (each tensor dense on a storage of its own), else such a copy of it."""
    alone = len({t.untyped_storage().data_ptr() for t in first}) == len(first)
    if alone and all(t.is_contiguous() and t.storage_offset() == 0
                     and t.untyped_storage().nbytes() == t.numel() * t.element_size()
                     for t in first):
        return first
    return tuple(torch.empty_like(t).copy_(t) for t in first)


@dataclass(frozen=True)
class Layout:
    """What ``torch.empty_like`` keeps of a tensor (sizes, the strides of a dense one, dtype),
    without its memory. Not a tensor on the ``meta`` device: the first ``empty_like`` of one
    onto another device imports several hundred modules (sympy among them), which cost every
    runner 2-3 s on its first timed shape on an H200."""

    size: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype

    @classmethod
    def of(cls, tensor: torch.Tensor) -> Layout:
        size, stride = tuple(tensor.shape), tuple(tensor.stride())
        dense = sorted((s, n) for s, n in zip(stride, size, strict=True) if n != 1)
        expected = 1
        for step, length in dense:  # strides that tile the elements without gaps or overlap
            if step != expected:
                return cls(size, _contiguous(size), tensor.dtype)
            expected *= length
        return cls(size, stride, tensor.dtype)

    def empty(self, device: str) -> torch.Tensor:
        return torch.empty_strided(self.size, self.stride, dtype=self.dtype, device=device)


def _contiguous(size: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for length in reversed(size):
        strides.append(step)
        step *= max(length, 1)
    return tuple(reversed(strides))


class ShapeTiming:
    """The timed copies of one shape and the state of its measurement."""

    def __init__(self, session: Session, shape: Shape, secret: int) -> None:
        self.session = session
        self.shape = shape
        self.params = dict(shape)
        self.secret = secret
        self.index = 0
        began = time.perf_counter()
        module, device = session.task.module, session.device
        first = tuple(module.make_inputs(self.params, timing_seed(secret, 0), device))
        outputs = tuple(module.make_outputs(self.params, device))
        if session.on_gpu:
            self.copy_plan = plan_copies(_nbytes(first) + _nbytes(outputs),
                                         session.cache_bytes)
            self.copies = self.copy_plan.copies
        else:
            self.copies = CPU_TIMING_COPIES
        session.problem_bytes = max(session.problem_bytes, _nbytes(first) + _nbytes(outputs))
        # the first draw is the candidate's copy 0 (refreshed before use like any copy), and
        # only its layout is kept for the other copies: on a problem of several GB a draw
        # kept aside would be one more copy of the inputs on the device
        self._layout = tuple(Layout.of(t) for t in first)
        self.inputs: dict[str, list[tuple]] = {k: [] for k in KERNELS}
        self.outputs: dict[str, list[tuple]] = {k: [] for k in KERNELS}
        self.refreshed: dict[str, dict[int, int]] = {k: {} for k in KERNELS}
        # as ``refresh`` would make it: the draw of index 0, its outputs poisoned
        poison(outputs, FIRST_POISON)
        self.inputs[CANDIDATE].append(_as_copy(first))
        self.outputs[CANDIDATE].append(outputs)
        self.refreshed[CANDIDATE][0] = self.index
        self.index += 1
        del first, outputs
        # what each step cost inside the runner: "copies" accumulates every copy made, of
        # which "alloc" their buffers and "fill" their values; "init" is this constructor
        self.seconds: dict[str, float] = {"copies": 0.0, "alloc": 0.0, "fill": 0.0}
        # copies are made as the measurement needs them: a graph of n calls uses n of them
        self.ensure(min(self.copies, WARM_COPIES))
        self.mode, self.calls_per_sample, self.graphs = "cpu", 1, list[object]()
        # graph mode: per kernel, a graph poisoning the outputs of every copy its graph uses
        self.poisons: list[object] = []
        # on a GPU: the candidate's copies (the ones it returns) -> the fingerprint of their
        # outputs taken right after their last timed call returned
        self.prints: dict[int, torch.Tensor] = {}
        self.checked: list[int] = []  # graph mode: the copies fingerprinted after the last replay
        self.flush = Flusher(session.flusher)
        self.seconds["init"] = time.perf_counter() - began

    def ensure(self, count: int) -> None:
        """At least ``count`` copies per kernel (at most ``copies``), each made and filled: the
        first ``DRAWN_COPIES`` with draws of their own, the others with a device copy of the
        draw of one of those (``_fill``)."""
        module, device = self.session.task.module, self.session.device
        began = time.perf_counter()
        for kernel in KERNELS:
            while len(self.inputs[kernel]) < min(count, self.copies):
                allocated = time.perf_counter()
                self.inputs[kernel].append(tuple(layout.empty(device)
                                                 for layout in self._layout))
                self.outputs[kernel].append(tuple(module.make_outputs(self.params, device)))
                filled = time.perf_counter()
                self._fill(kernel, len(self.inputs[kernel]) - 1)
                done = time.perf_counter()
                self.seconds["alloc"] += filled - allocated
                self.seconds["fill"] += done - filled
        self.seconds["copies"] += time.perf_counter() - began

    def _fill(self, kernel: str, copy: int) -> None:
        """A new copy's inputs and poisoned outputs. A draw of ``make_inputs`` costs a few
        hundred microseconds of host time, and a graph of fast calls holds hundreds of copies
        (a few seconds an evaluation on a task of many shapes), so copy ``c`` beyond the first
        ``DRAWN_COPIES`` takes the inputs of copy ``c % DRAWN_COPIES`` and its refresh index
        (the judge re-derives them from it, as for any copy). Copies used in a timed sample
        are refreshed with a draw of their own before it, as ever."""
        if copy < DRAWN_COPIES:
            self.refresh(kernel, copy)
            return
        source = copy % DRAWN_COPIES
        for tensor, value in zip(self.inputs[kernel][copy], self.inputs[kernel][source],
                                 strict=True):
            tensor.copy_(value)
        poison(self.outputs[kernel][copy], FIRST_POISON)
        self.refreshed[kernel][copy] = self.refreshed[kernel][source]

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
        settings = self.session.settings
        began = time.perf_counter()
        if not self.session.on_gpu:
            self.ensure(self.copies)
            for call in calls:
                for _ in range(settings.warmup):
                    call(0)
            self.session.synchronize()
        else:
            estimates = warm_up(calls, len(self.inputs[KERNELS[0]]), settings.warmup,
                                self.flush)
            self.seconds["warm_up"] = time.perf_counter() - began
            if max(estimates) < settings.cuda_graph_below_us:
                captured, made = time.perf_counter(), self.seconds["copies"]
                self.calls_per_sample, self.graphs = capture_graphs(
                    calls, self.copy_plan, max(estimates), self.flush, self.ensure)
                self.poisons = self._capture_poisons() if self.graphs else []
                if not self.poisons:
                    self.graphs = []
                self.seconds["capture"] = (time.perf_counter() - captured
                                           - (self.seconds["copies"] - made))
            if not self.graphs:  # events: one copy a round, in turn
                self.ensure(min(self.copies, settings.max_repeats))
            self.mode = "graph" if self.graphs else "events"
        self.seconds["warm"] = time.perf_counter() - began
        # what this step cost inside the runner (diagnostics only: the runner is the
        # candidate's, so nothing is decided on these figures)
        return {"type": "warm", "mode": self.mode, "copies": self.copies,
                "calls_per_sample": self.calls_per_sample,
                "made": len(self.inputs[KERNELS[0]]),
                "seconds": {k: round(v, 4) for k, v in self.seconds.items()}}

    def _used(self) -> int:
        """How many copies a graph's calls use (call ``i`` works on copy ``i % copies``)."""
        return min(self.calls_per_sample, self.copies)

    def _capture_poisons(self) -> list[object]:
        """Per kernel, a graph that poisons the outputs of every copy its timed graph uses;
        none (the shape is then timed with events) where one cannot be captured."""
        poisons = []
        for kernel in KERNELS:
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(graph):
                    poison_all(self.outputs[kernel][:self._used()])
            except RuntimeError:
                return []
            poisons.append(graph)
        return poisons

    def _print_replay(self) -> None:
        """After a replay of the candidate's graph: the copy of its last call and one other,
        drawn now, fingerprinted as the timed calls left them."""
        last = (self.calls_per_sample - 1) % self.copies
        other = random.randrange(self._used())
        self.checked = [last] if other == last else [last, other]
        outputs = [self.outputs[CANDIDATE][c] for c in self.checked]
        prints = fingerprint([t for copy in outputs for t in copy])  # one stack for all
        self.prints = {c: prints[i * len(outputs[0]):(i + 1) * len(outputs[0])]
                       for i, c in enumerate(self.checked)}

    def _sample(self, kernel: int, round_: int) -> int:
        """One untimed refresh (every copy's outputs poisoned, in graph mode) and flush, then
        one timed sample (ns) of ``KERNELS[kernel]``."""
        name = KERNELS[kernel]
        if self.graphs:
            copy = (self.calls_per_sample - 1) % self.copies
            self.refresh(name, copy)
            self.poisons[kernel].replay()  # type: ignore[attr-defined]
            return graph_sample(self.graphs[kernel], self.calls_per_sample, self.flush,
                                self._print_replay if name == CANDIDATE else None)
        copy = round_ % self.copies
        self.refresh(name, copy)
        if self.session.on_gpu:
            taken = event_sample(self._call(name), copy, self.flush)
            if name == CANDIDATE:
                self.prints[copy] = fingerprint(self.outputs[name][copy])
            return taken
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
        reply = {"type": "batch", "rounds": rounds, "samples": samples, "written": written,
                 "problem": replaced_timers() or self.session.tampering(),
                 "refreshed": self._refreshed(written)}
        if self.session.on_gpu:
            reply["fingerprints"] = {str(c): [int(v) for v in self.prints[c].tolist()]
                                     for c in written if c in self.prints}
        return reply

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
            return list(self.checked)
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
