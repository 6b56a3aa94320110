"""Timing on the CPU: interleaved rounds, cache flushing, and a stopping rule.

One round calls every measured function once, in an order that rotates each round (so that
neither the candidate nor the starting kernel always runs first, right after the flush). Each call
is timed alone with ``time.perf_counter_ns`` around the call and the language's ``synchronize``;
the cache flush happens before, outside the timed region. The launcher's Python overhead (a few
microseconds) is inside every measured call, the candidate's and the baseline's alike.

Stopping rule: after at least ``min_repeats`` rounds, stop once the standard error of the first
function's median is at most ``target_rel_se`` of the median, or the wall-clock budget (flushes
included) is spent; never go past ``max_repeats``. The standard error of the median is the
normal-theory one, sqrt(pi/2) * sigma / sqrt(n), with sigma estimated robustly as IQR / 1.349 so
that a few preempted calls do not inflate it.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

_SE_MEDIAN_FACTOR = math.sqrt(math.pi / 2)
_IQR_PER_SIGMA = 1.349


@dataclass(frozen=True)
class TimingStats:
    """Summary of one function's samples, in microseconds."""

    median_us: float
    iqr_us: float
    samples: int
    rel_se: float  # estimated standard error of the median / median


def summarize(samples_ns: Sequence[int]) -> TimingStats:
    n = len(samples_ns)
    if n == 0:
        return TimingStats(math.nan, math.nan, 0, math.inf)
    median = statistics.median(samples_ns)
    if n < 4:
        return TimingStats(median / 1e3, math.nan, n, math.inf)
    q1, _, q3 = statistics.quantiles(samples_ns, n=4, method="inclusive")
    sigma = (q3 - q1) / _IQR_PER_SIGMA
    rel_se = _SE_MEDIAN_FACTOR * sigma / math.sqrt(n) / median if median > 0 else math.inf
    return TimingStats(median / 1e3, (q3 - q1) / 1e3, n, rel_se)


@dataclass(frozen=True)
class TimingPlan:
    """How long to measure; built from ``EvaluatorSettings``."""

    warmup: int
    min_repeats: int
    max_repeats: int
    target_rel_se: float
    budget_s: float


class CacheFlusher:
    """Evicts the caches by touching a buffer of ``nbytes`` (2x the last level, or the L2).

    CPU: a read-modify-write (``add_``) rather than a fill: large fills may use non-temporal
    stores, which bypass the cache and evict nothing. GPU: a read (a sum), which evicts the L2
    and leaves it clean: dirty lines (the poisoned outputs, the previous call's results) are
    written back during the flush, not during the timed call, which would otherwise pay for
    another kernel's write-back.
    """

    def __init__(self, nbytes: int, device: str) -> None:
        import torch

        self.nbytes = nbytes
        self._buffer = torch.zeros(max(nbytes // 4, 1), dtype=torch.int32, device=device)
        self._read_only = device.startswith("cuda")

    def __call__(self) -> None:
        if self._read_only:
            self._buffer.sum()
        else:
            self._buffer.add_(1)


def measure(calls: Sequence[Callable[[], None]], plan: TimingPlan,
            flush: Callable[[], None] | None, synchronize: Callable[[], None],
            prepare: Sequence[Callable[[], None] | None] | None = None) -> list[TimingStats]:
    """Time ``calls`` interleaved; the stopping rule follows ``calls[0]``.

    ``prepare[i]``, when given, runs before each call of ``calls[i]``, untimed and before the
    flush (used to poison outputs so that the last timed call can be re-checked).
    """
    prepare = prepare or [None] * len(calls)
    for call in calls:
        for _ in range(plan.warmup):
            call()
    synchronize()
    samples: list[list[int]] = [[] for _ in calls]
    started = time.perf_counter()
    for round_ in range(plan.max_repeats):
        for k in range(len(calls)):
            index = (k + round_) % len(calls)
            if prepare[index] is not None:
                prepare[index]()
            if flush is not None:
                flush()
            synchronize()
            begin = time.perf_counter_ns()
            calls[index]()
            synchronize()
            samples[index].append(time.perf_counter_ns() - begin)
        if round_ + 1 >= plan.min_repeats:
            lead = summarize(samples[0])
            if lead.rel_se <= plan.target_rel_se or time.perf_counter() - started >= plan.budget_s:
                break
    return [summarize(s) for s in samples]
