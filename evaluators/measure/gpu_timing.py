"""Timing on a CUDA GPU: events, an L2 flush, fresh inputs, interleaving, graph replay.

The functions measured take a *copy index*: the caller holds several copies of a problem
(inputs and outputs) and each call works on the next copy, so that no call finds its data where
the previous call left it. Two modes, chosen once per shape from a warm-up estimate of the
slowest function, so that the candidate and the starting kernel are always measured alike:

- **events** (calls of ``cuda_graph_below_us`` or more): per sample, ``prepare`` (poison the
  outputs), the L2 flush (a read-modify-write of twice the L2), the start event, the call, a
  device-wide ``synchronize`` (work on any stream is inside the sample) and the end event. The
  flush keeps the GPU busy while the host launches, so launch overhead is hidden; the device-wide
  synchronize adds a few microseconds of host round trip to every sample, which is why fast
  kernels use
- **graph** (faster calls): each function's ``n`` calls on rotating copies are captured in one
  CUDA graph (``n`` chosen so that a replay takes about ``GRAPH_REPLAY_US``); a sample is one
  replay after a flush, between two events on the replaying stream, divided by ``n``. A replay
  runs only what was captured, and a capture must join every stream it forks back into the
  capturing one, so the end event follows all of a replay's work: no device-wide synchronize
  (a host round trip of 13-22 us on a virtual machine) sits inside the sample, and a replay of
  about a millisecond is long enough (0.5% of a 4 ms replay used to be that round trip). The
  copies are chosen so that a copy is used again only after at least twice the L2's bytes have
  been moved (or never within one replay), so every call reads cold inputs, as after a flush.
  A function that cannot be captured (its launcher synchronises, say) sends both to events.

Rounds interleave the functions, the order rotating each round; the stopping rule is that of
evaluators/measure/timing.py (standard error of the first function's median under ``target_rel_se``, or
the budget spent, within ``min_repeats``..``max_repeats`` rounds).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .timing import TimingPlan, TimingStats, summarize

# The first seed of the inputs of timed copies (the baselines and the starting kernel's
# calibration draw theirs from here; a candidate's timed inputs come from a secret seed).
TIMING_SEED = 1000
GRAPH_REPLAY_US = 1000.0
MAX_COPIES = 512
MAX_COPIES_BYTES = 1 << 30
MAX_GRAPH_CALLS = 512
SPREAD_L2S = 8

Call = Callable[[int], None]


class GraphCaptureError(RuntimeError):
    """Capturing a function into a CUDA graph failed (it is then not graph-safe)."""


@dataclass(frozen=True)
class CopyPlan:
    """How many problem copies to hold, and whether reusing one within a replay stays cold."""

    copies: int
    cold_reuse: bool


def plan_copies(footprint_bytes: int, l2_bytes: int) -> CopyPlan:
    """Copies so that a copy comes round again only after ``2 * l2_bytes`` of other traffic.

    As many as span ``SPREAD_L2S`` times the L2 (within the caps): the time of a small kernel
    depends a little on where its buffers landed in device memory, which differs between
    processes, and more copies average over more placements. A footprint of at least twice
    the L2 gets one copy: a call on it moves twice the L2 itself, so the next call on the same
    copy finds its first bytes evicted (cold, as after a flush), and a KernelBench-size problem
    (8-17 GB) cannot afford a second copy per kernel (evaluators/judge/memory_plan.py).
    """
    footprint = max(footprint_bytes, 1)
    if l2_bytes > 0 and footprint >= 2 * l2_bytes:
        return CopyPlan(1, cold_reuse=True)
    wanted = math.ceil(SPREAD_L2S * l2_bytes / footprint) + 1
    allowed = max(2, min(MAX_COPIES, MAX_COPIES_BYTES // footprint))
    copies = max(2, min(wanted, allowed))
    return CopyPlan(copies, cold_reuse=(copies - 1) * footprint >= 2 * l2_bytes)


@dataclass(frozen=True)
class GpuTiming:
    """Per-function statistics plus how they were measured."""

    stats: list[TimingStats]
    mode: str  # "events" or "graph"
    calls_per_sample: int
    copies: int
    last_copy: list[int]  # the copy each function's last timed call wrote


class Flusher:
    def __init__(self, flush: Callable[[], None] | None) -> None:
        self.flush = flush

    def __call__(self) -> None:
        if self.flush is not None:
            self.flush()


def event_sample(call: Call, copy: int, flush: Flusher) -> int:
    """One call between events, after a flush; nanoseconds."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    flush()
    start.record()
    call(copy)
    torch.cuda.synchronize()
    end.record()
    end.synchronize()
    return round(start.elapsed_time(end) * 1e6)


def _capture(call: Call, calls: int, copies: int) -> object:
    import torch

    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for i in range(calls):
                call(i % copies)
    except Exception as exc:
        raise GraphCaptureError(f"capturing {calls} calls in a CUDA graph failed: "
                                f"{type(exc).__name__}: {exc}") from exc
    return graph


def _capture_all(calls: Sequence[Call], graph_calls: int, copies: int) -> list[object]:
    """Every function's graph, or none when one cannot be captured (timed with events then);
    a CUDA error that leaves the context unusable is raised."""
    from ..languages.cuda_errors import is_sticky

    graphs = []
    for call in calls:
        try:
            graphs.append(_capture(call, graph_calls, copies))
        except GraphCaptureError as exc:
            if exc.__cause__ is not None and is_sticky(exc.__cause__):
                raise exc.__cause__ from None
            return []
    return graphs


def graph_sample(graph: object, calls: int, flush: Flusher,
                 returned: Callable[[], None] | None = None) -> int:
    """One replay between events, after a flush; nanoseconds per call. ``returned``, when
    given, runs once the replay's stream has passed the end event and before the device-wide
    synchronize: what it queues sees the outputs as the timed calls left them, before any work
    left running elsewhere on the device could finish."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    flush()
    start.record()
    graph.replay()  # type: ignore[attr-defined]
    end.record()  # after everything the replay runs: see the module's docstring
    end.synchronize()
    if returned is not None:
        returned()
    torch.cuda.synchronize()
    return round(start.elapsed_time(end) * 1e6 / calls)


def warm_up(calls: Sequence[Call], copies: int, warmup: int, flush: Flusher) -> list[float]:
    """Run each function once untimed, then ``warmup`` (at least 3) times timed; per function
    the fastest timed call, in us (the fastest: a host hiccup in one sample would otherwise
    shorten the graph and leave more of the timer's overhead in each call's share)."""
    estimates = []
    for index, call in enumerate(calls):
        call(index % copies)  # first call: module load, lazy initialisation, untimed
        samples = [event_sample(call, (index + k) % copies, flush)
                   for k in range(max(warmup, 3))]
        estimates.append(min(samples) / 1e3)
    return estimates


def _calls_per_graph(call_us: float, copy_plan: CopyPlan) -> int:
    calls = max(1, min(MAX_GRAPH_CALLS, math.ceil(GRAPH_REPLAY_US / max(call_us, 0.5))))
    return calls if copy_plan.cold_reuse else min(calls, copy_plan.copies)


def capture_graphs(calls: Sequence[Call], copy_plan: CopyPlan, estimate_us: float,
                   flush: Flusher, ensure: Callable[[int], None] | None = None
                   ) -> tuple[int, list[object]]:
    """(calls per graph, one graph per function), or (1, []) when one cannot be captured;
    ``ensure(n)``, when given, is called before a capture that uses the first ``n`` copies (the
    caller makes copies as they are needed).

    Sized from ``estimate_us``, then once more from a replay of the first graphs: the events
    estimate carries the host's launch and synchronize latency (tens of us on a virtual
    machine), which would make the graphs short and leave that overhead in every call's share.
    """
    count = _calls_per_graph(estimate_us, copy_plan)
    if ensure is not None:
        ensure(min(count, copy_plan.copies))
    graphs = _capture_all(calls, count, copy_plan.copies)
    if not graphs:
        return 1, []
    replayed_us = max(graph_sample(g, count, flush) for g in graphs) / 1e3
    better = _calls_per_graph(replayed_us, copy_plan)
    if better > 1.5 * count:
        if ensure is not None:
            ensure(min(better, copy_plan.copies))
        count, graphs = better, _capture_all(calls, better, copy_plan.copies)
    return (count, graphs) if graphs else (1, [])


def measure_gpu(calls: Sequence[Call], copy_plan: CopyPlan, plan: TimingPlan,
                flush: Callable[[], None] | None, graph_below_us: float,
                prepare: Sequence[Call | None] | None = None) -> GpuTiming:
    """Time ``calls`` interleaved on the current GPU; the stopping rule follows ``calls[0]``.

    ``prepare[i](copy)``, when given, runs before each sample of ``calls[i]``, untimed and before
    the flush (in graph mode, on the copy of the replay's last call only).
    """
    prepare = prepare or [None] * len(calls)
    flusher = Flusher(flush)
    copies = copy_plan.copies
    estimates = warm_up(calls, copies, plan.warmup, flusher)
    slowest = max(estimates)
    graph_calls, graphs = 1, list[object]()
    if slowest < graph_below_us:
        graph_calls, graphs = capture_graphs(calls, copy_plan, slowest, flusher)
    samples: list[list[int]] = [[] for _ in calls]
    cursor = [0] * len(calls)
    last = [0] * len(calls)
    started = time.perf_counter()
    for round_ in range(plan.max_repeats):
        for k in range(len(calls)):
            index = (k + round_) % len(calls)
            if graphs:
                last[index] = (graph_calls - 1) % copies
                if prepare[index] is not None:
                    prepare[index](last[index])
                samples[index].append(graph_sample(graphs[index], graph_calls, flusher))
            else:
                last[index] = cursor[index] % copies
                cursor[index] += 1
                if prepare[index] is not None:
                    prepare[index](last[index])
                samples[index].append(event_sample(calls[index], last[index], flusher))
        if round_ + 1 >= plan.min_repeats:
            lead = summarize(samples[0])
            if lead.rel_se <= plan.target_rel_se or time.perf_counter() - started >= plan.budget_s:
                break
    return GpuTiming([summarize(s) for s in samples], "graph" if graphs else "events",
                     graph_calls, copies, last)


def timer_overhead_us(samples: int = 50) -> float:
    """The median of an empty events sample (start, device-wide synchronize, end), in us: what
    each events-mode sample carries besides the call."""
    import torch

    values = []
    for _ in range(samples):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda.synchronize()
        end.record()
        end.synchronize()
        values.append(start.elapsed_time(end) * 1e3)
    return sorted(values)[len(values) // 2]
