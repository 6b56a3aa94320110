"""Timing, judged: times reported by the runner, cross-checked against wall time and outputs.

Per tuning shape the judge sends a per-evaluation secret seed (only now) and asks for:

1. ``warm``: warm-up calls, the timing mode (CPU; on a GPU events or graph replays);
2. ``batch``: the interleaved rounds of the candidate and the starting kernel, on inputs
   refreshed before every sample; the reply carries every sample, and the arena the last
   outputs and inputs of the candidate's copies used last;
3. ``BURSTS`` times a ``burst``: the first copies refreshed from a seed sent with the request
   (so no output can be computed before it), the candidate on each of them back to back,
   synchronised, the copies returned; timed by the judge from request to reply. And as often a
   null burst (the same without the calls).

Checks, each on data the judge holds:

- deferred work (GPU): the runner fingerprints the outputs of the batch's returned copies as
  soon as their timed call has returned, before the device-wide synchronize; the judge
  fingerprints the outputs it reads back after it, and any difference is REJECTED ("deferred
  work"): something wrote them after the timed interval had ended;
- ``RECHECKED_COPIES`` of the returned copies of the batch and of each burst, picked once the
  reply is in (in graph mode the batch returns the copy of the replay's last call and one other
  drawn after the replay, every copy's outputs having been poisoned before it): their inputs, re-derived from the secret and the
  refresh index the runner reports for it, must be the inputs that came back (REJECTED
  otherwise), and its outputs must match the judge's reference of them (INCORRECT "during
  timing");
- wall time: the bursts' time per call by the judge's clock (the runner group's CPU time as
  the OS accounts it on the CPU, wall time on a GPU), ``(min burst - min null burst) / calls``
  for the candidate and for the starting kernel (minimums: a preempted burst only takes
  longer; the null burst counts at most ``NULL_CAP`` times its time in the clean calibration
  runner, so that it cannot be slowed to hide the calls). The speedup the batch reports must
  agree with the speedup the bursts show: the candidate's median must be at least the starting
  kernel's reported median times the ratio of their bursts, times ``1 - WALL_TOLERANCE``, less
  a slack (REJECTED "reported times disagree with the batch's wall time"). On shapes whose
  calls are short against what a burst does besides them that floor has little force (it is
  below zero where the start takes under about 40 us), so the floor is never lower than the
  shape's own (``ShapeTimer.time``'s ``floor_us``, from judgement.py: ``LAUNCH_FLOOR_SHARE``
  of the smallest kernel call the machine was measured to replay; the roofline time is the
  roofline verdict's floor): no real call reports less;
- canary: the starting kernel is burst too; its time per call by the judge's clock in the
  candidate's runner must be within ``CANARY_FACTOR`` of the same in the clean calibration
  runner, and on a GPU its reported median too (REJECTED "timing disturbed").

A wall-time or canary disagreement is a verdict only when a second, fresh measurement of the
shape disagrees too (a loaded machine upsets one short measurement; a forgery upsets both).

Limit: every timed number comes from the candidate's process; what the judge can prove is that
the returned outputs are right and that the reported median is not far below what its own clock
saw a burst of real calls take.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...search import Shape, ShapeResult, Status
from ..correctness import compare, fingerprint, first_bit_difference
from ..measure.gpu_timing import plan_copies
from ..measure.machine import device_cache_bytes
from ..measure.shared_memory import BaseArena
from ..measure.timing import TimingStats, summarize
from ..protocol import (
    CANDIDATE,
    CPU_TIMING_COPIES,
    GPU_RETURNED_COPIES,
    START,
    TensorSpec,
    layout,
    timing_seed,
)
from ..settings import EvaluatorSettings
from .references import References
from .trial import CandidateFault, Trial, field, malformed

WALL_TOLERANCE = 0.5
CPU_SLACK_US = 5.0
GPU_SLACK_US = 20.0  # a GPU burst carries each call's launch, a graph replay's share does not
BURSTS = 2
# Returned copies checked per batch or burst, picked at random once the reply is in: a burst
# that skipped half its calls is caught with probability 0.79 per burst (8 copies).
RECHECKED_COPIES = 2
NULL_CAP = 3.0
NULL_SLACK_S = 0.005
CANARY_FACTOR = 3.0
CANARY_SLACK_US = 20.0
_MODES = ("cpu", "events", "graph")


class TimingDisagreement(CandidateFault):
    """Reported times that disagree with the judge's clock (REJECTED once it reproduces)."""


class CanaryDisagreement(TimingDisagreement):
    """The starting kernel, timed in the candidate's runner, disagrees with its clean figures."""


@dataclass(frozen=True)
class CleanFigures:
    """The starting kernel timed in a runner that never held a candidate, on one shape: its
    reported median (us), its bursts' time per call by the judge's clock (us), and the fastest
    null burst (s): what the canary and the null cap compare with."""

    start_us: float
    burst_us: float
    null_burst_s: float

    @classmethod
    def of(cls, timed: Timed) -> CleanFigures:
        """The figures of a shape timed with the starting kernel loaded as the candidate."""
        return cls(timed.start.median_us, timed.burst_us, timed.null_burst_s)


@dataclass(frozen=True)
class Timed:
    """One shape's timing: both kernels' statistics and how they were measured."""

    candidate: TimingStats
    start: TimingStats
    detail: dict[str, Any]
    burst_us: float  # the bursts' time per call by the judge's clock
    null_burst_s: float
    errors: tuple[float, float]  # max abs and max rel error of the returned copies


@dataclass(frozen=True)
class _Measurement:
    """One measurement of a shape: the fields each of its requests carries (the secret among
    them), the arena's slots for the copies returned, and the runner's copies per kernel."""

    shape: Shape
    base: dict[str, Any]
    slots: list[dict[str, Any]]
    copies: int
    mode: str = "cpu"


@dataclass(frozen=True)
class BurstFigures:
    """What the bursts took per call by the judge's clock (us): the candidate's and the
    starting kernel's (null burst subtracted), and what a burst does besides the calls
    (``noise_us``: the null burst's share)."""

    candidate_us: float
    start_us: float
    noise_us: float


def returned_copies(settings: EvaluatorSettings, footprint_bytes: int, l2_bytes: int) -> int:
    """The arena's slots for the returned copies of a timed problem of ``footprint_bytes``:
    every copy on the CPU; on a GPU ``GPU_RETURNED_COPIES``, or fewer where the runner holds
    fewer copies per kernel (``plan_copies``: one for a footprint of twice the L2 or more; the
    batch then returns its one copy, each burst calls and returns one)."""
    if not settings.device.startswith("cuda"):
        return CPU_TIMING_COPIES
    return min(GPU_RETURNED_COPIES, plan_copies(footprint_bytes, l2_bytes).copies)


def l2_bytes(settings: EvaluatorSettings) -> int:
    """The L2 the runner plans its copies with (the same call, the same device); 0 on the CPU."""
    return device_cache_bytes(settings.device) if settings.device.startswith("cuda") else 0


def _samples(reply: dict[str, Any], rounds: int) -> list[list[int]]:
    raw = reply.get("samples")
    if not isinstance(raw, list) or len(raw) != 2:
        raise malformed("samples must be two lists")
    out = []
    for series in raw:
        if not isinstance(series, list) or len(series) != rounds or not all(
                isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 10 ** 13
                for v in series):
            raise malformed(f"samples must be {rounds} non-negative integers per kernel")
        out.append(series)
    return out


class ShapeTimer:
    """Times one shape of one candidate in its trial."""

    def __init__(self, trial: Trial, arena: BaseArena, references: References, task: Any,
                 settings: EvaluatorSettings) -> None:
        self.trial = trial
        self.arena = arena
        self.references = references
        self.task = task
        self.settings = settings
        self.l2_bytes = l2_bytes(settings)

    def _slots(self, shape: Shape) -> list[dict[str, Any]]:
        inputs, outputs = self.references.described(shape, 0)
        footprint = layout([*inputs, *outputs])[1]
        end, slots = 0, []
        for _ in range(returned_copies(self.settings, footprint, self.l2_bytes)):
            outs, end = layout(outputs, end)
            ins, end = layout(inputs, end)
            slots.append({"outputs": [s.as_json() for s in outs],
                          "inputs": [s.as_json() for s in ins]})
        return slots

    def time(self, shape: Shape, clean: CleanFigures | None, floor_us: float = 0.0,
             reclean: Callable[[Shape], CleanFigures | None] | None = None) -> Timed:
        """One shape timed and cross-checked; a disagreement with the judge's clock must
        reproduce in a second, fresh measurement (new secret, new copies) to be a verdict: a
        loaded machine can upset one short measurement, a forgery upsets every one.
        ``floor_us``: no real call of the shape takes less (the wall-time check's own floor).

        A canary's disagreement may be the clean figures' own: measured once, at calibration
        (or read from its cache), on a machine whose load has changed since. ``reclean``, where
        given, measures them again now in a runner without candidate code (None where it
        cannot); the second measurement is held to those."""
        note = " (measured twice, with fresh inputs)"
        try:
            return self._time_once(shape, clean, floor_us)
        except CanaryDisagreement:
            fresh = reclean(shape) if reclean is not None and clean is not None else None
            if fresh is not None:
                clean = fresh
                note = (" (measured twice, with fresh inputs; the second time against the "
                        "starting kernel timed again in a fresh runner without candidate code)")
        except TimingDisagreement:
            pass
        try:
            return self._time_once(shape, clean, floor_us)
        except TimingDisagreement as again:
            again.message += note
            raise

    def _time_once(self, shape: Shape, clean: CleanFigures | None, floor_us: float) -> Timed:
        s = self.settings
        secret = random.SystemRandom().randrange(1 << 40)
        base = {"type": "time", "shape": dict(shape), "secret": secret}
        where = f"on shape {shape.label}"
        self.trial.at(f"{where} (timing)", shape.label)
        warm = self.trial.ask({**base, "step": "warm"}, "warm")
        self.trial.call_problem(warm, f"{where} while being timed", shape.label)
        mode = field(warm, "mode", str)
        if mode not in _MODES:
            raise malformed(f"unknown timing mode {mode!r}", shape.label)
        copies = field(warm, "copies", int, within=(1, 1 << 16))
        per_sample = field(warm, "calls_per_sample", int, within=(1, 1 << 20))
        slots = self._slots(shape)
        measured = _Measurement(shape, base, slots, copies, mode)
        batch = self.trial.ask({**base, "step": "batch", "slots": slots}, "batch")
        self.trial.call_problem(batch, f"{where} while being timed", shape.label)
        rounds = field(batch, "rounds", int,
                       within=(min(s.min_repeats, s.max_repeats), s.max_repeats))
        samples = _samples(batch, rounds)
        returned = self._returned(batch, measured)
        if mode != "cpu":
            _deferred(batch, returned, shape)
        errors = self._recheck(returned, secret, shape)
        mine, start = summarize(samples[0]), summarize(samples[1])
        walls: dict[str, list[float]] = {CANDIDATE: [], START: [], "null": []}
        for _ in range(BURSTS):
            for kind in walls:
                seed = random.SystemRandom().randrange(1 << 40)
                wall, returned = self._burst(measured, kind, seed)
                walls[kind].append(wall)
                if kind == CANDIDATE:
                    self._recheck(returned, seed, shape)
        null_burst = min(walls["null"])
        if clean is not None:
            null_burst = min(null_burst, NULL_CAP * clean.null_burst_s + NULL_SLACK_S)
        burst_us, start_burst_us = (max(min(walls[k]) - null_burst, 0.0) / len(slots) * 1e6
                                    for k in (CANDIDATE, START))
        # what a burst does besides the calls (refreshes, copies back), per call: the noise of
        # the difference scales with it, so it widens both checks
        bursts = BurstFigures(burst_us, start_burst_us, null_burst / len(slots) * 1e6)
        if clean is not None:
            self._canary(shape, start, bursts, clean)
        self._cross_check(shape, bursts, (mine, start), clean is not None, floor_us)
        spent = field(warm, "seconds", dict, optional=True) or {}
        detail = {"mode": mode, "calls_per_sample": per_sample, "copies": copies,
                  "runner_warm_s": {str(k)[:40]: float(v) for k, v in list(spent.items())[:12]
                                    if isinstance(v, (int, float)) and not isinstance(v, bool)
                                    and math.isfinite(v)},
                  "rounds": rounds, "burst_us_per_call": burst_us,
                  "start_burst_us_per_call": start_burst_us, "null_burst_s": null_burst,
                  "burst_calls": len(slots)}
        return Timed(mine, start, detail, burst_us, null_burst, errors)

    def _clock(self) -> Callable[[], float]:
        """The judge's clock for a burst: the runner group's CPU time on the CPU (a loaded
        machine stretches wall time, not CPU time; the calls are single-threaded), wall time
        on a GPU (the work is the device's)."""
        if self.settings.device.startswith("cuda"):
            return time.perf_counter
        runner = self.trial.runner
        return runner.cpu_seconds if math.isfinite(runner.cpu_seconds()) else time.perf_counter

    def _burst(self, measured: _Measurement, kind: str, seed: int
               ) -> tuple[float, list[tuple[int, int, tuple, tuple]]]:
        """One burst (or null burst): its time by the judge's clock and the copies it returned
        (their inputs drawn from ``seed``, which the runner learns with the request)."""
        shape, slots = measured.shape, measured.slots
        where = f"on shape {shape.label} while being timed"
        clock = self._clock()
        began = clock()
        null = kind == "null"
        reply = self.trial.ask({**measured.base, "step": "burst", "slots": slots, "null": null,
                                "kernel": START if kind == START else CANDIDATE, "seed": seed},
                               "burst")
        wall = clock() - began
        self.trial.call_problem(reply, where, shape.label)
        if null:
            return wall, []
        return wall, self._returned(reply, measured, min(len(slots), measured.copies))

    def _returned(self, reply: dict[str, Any], measured: _Measurement,
                  expect: int | None = None) -> list[tuple[int, int, tuple, tuple]]:
        """(copy, refresh index, outputs, inputs) of ``RECHECKED_COPIES`` of the returned
        copies, picked now (after the reply) at random and read from the arena."""
        shape, slots, copies = measured.shape, measured.slots, measured.copies
        written = reply.get("written")
        refreshed = reply.get("refreshed")
        if not isinstance(written, list) or not isinstance(refreshed, dict) or not written \
                or len(written) > len(slots) or len(set(map(repr, written))) != len(written):
            raise malformed("written must list the returned copies once each", shape.label)
        if expect is not None and len(written) != expect:
            raise malformed(f"{len(written)} copies returned where {expect} were called",
                            shape.label)
        picked = []
        for slot, copy in zip(slots, written, strict=False):
            if not isinstance(copy, int) or isinstance(copy, bool) or not 0 <= copy < copies:
                raise malformed(f"returned copy {copy!r} is not a copy", shape.label)
            picked.append((slot, copy, field(refreshed, str(copy), int, within=(0, 1 << 40))))
        device = self.references.device
        out = []
        for slot, copy, index in random.sample(picked, min(RECHECKED_COPIES, len(picked))):
            outputs = tuple(self.arena.read(TensorSpec.of_json(x), device)
                            for x in slot["outputs"])
            inputs = tuple(self.arena.read(TensorSpec.of_json(x), device)
                           for x in slot["inputs"])
            out.append((copy, index, outputs, inputs))
        return out

    def _recheck(self, returned: list[tuple[int, int, tuple, tuple]], secret: int,
                 shape: Shape) -> tuple[float, float]:
        """Each returned copy against the judge's reference of its re-derived inputs; ``returned``
        is emptied as it goes and the reference computed on the re-derived inputs themselves,
        found identical to those returned (on a problem of several GB, one copy less held)."""
        max_abs = max_rel = 0.0
        where = f"on shape {shape.label} during timing"
        module = self.task.module
        while returned:
            copy, index, outputs, inputs = returned.pop()
            expected = tuple(module.make_inputs(dict(shape), timing_seed(secret, index),
                                                self.references.device))
            changed = first_bit_difference(expected, inputs)
            del inputs
            if changed is not None:
                raise CandidateFault(Status.REJECTED,
                                     f"the kernel modified its {changed.where('input')} {where} "
                                     f"(copy {copy}), or the runner misreported them: inputs "
                                     f"are read-only", [ShapeResult(shape=shape.label)])
            reference = tuple(module.reference(*expected))
            del expected
            comparison = compare(outputs, reference, self.task.tolerance)
            del outputs, reference
            if comparison.mismatch is not None:
                raise CandidateFault(
                    Status.INCORRECT,
                    f"wrong result of a timed call {where} (copy {copy}; the kernel changes its "
                    f"behaviour once timed?): {comparison.mismatch.describe()}",
                    [ShapeResult(shape=shape.label)])
            max_abs = max(max_abs, comparison.max_abs_err)
            max_rel = max(max_rel, comparison.max_rel_err)
        return max_abs, max_rel

    def _canary(self, shape: Shape, start: TimingStats, bursts: BurstFigures,
                clean: CleanFigures) -> None:
        """The starting kernel in the candidate's runner against a runner without candidate
        code: its bursts by the judge's clock (CPU time, which the load of the machine does not
        stretch but a thread of the candidate's does) within ``CANARY_FACTOR``; on a GPU its
        reported median too (device time, which the host's load does not move; on the CPU a
        sample is wall time, which a loaded machine stretches tenfold)."""
        checks = [("its calls back to back took", bursts.start_us, clean.burst_us,
                   CANARY_FACTOR, CANARY_SLACK_US + bursts.noise_us)]
        if self.settings.device.startswith("cuda"):
            checks.append(("its reported median was", start.median_us, clean.start_us,
                           CANARY_FACTOR, CANARY_SLACK_US))
        for what, now, then, factor, slack in checks:
            if not then / factor - slack <= now <= then * factor + slack:
                raise CanaryDisagreement(
                    Status.REJECTED,
                    f"timing disturbed on shape {shape.label}: timed alongside the candidate, "
                    f"the starting kernel was not itself ({what} {now:.2f} us per call against "
                    f"{then:.2f} us in a runner without candidate code)",
                    [ShapeResult(shape=shape.label)])

    def _cross_check(self, shape: Shape, bursts: BurstFigures,
                     medians: tuple[TimingStats, TimingStats], calibrated: bool,
                     own_floor_us: float) -> None:
        """The speedup the runner reports must agree with the one the judge's clock saw.

        The floor of the candidate's median (``medians``: the candidate's, the starting
        kernel's) is the starting kernel's reported median scaled by the ratio of the two
        kernels' bursts (the candidate's lowered and the starting kernel's raised by half the
        bursts' noise), times ``1 - WALL_TOLERANCE``, less a slack; whatever the runner reports
        for either kernel, the speedup it can claim is then at most the bursts' speedup over
        ``1 - WALL_TOLERANCE``; the starting kernel's bursts are held to their clean time by
        the canary (``calibrated``: there are clean figures; without them only the shape's
        ``own_floor_us`` holds). The floor is never below ``own_floor_us``, which no real call
        of the shape undercuts, so that it keeps its force on shapes of a few microseconds.
        """
        mine, start = medians
        slack = GPU_SLACK_US if self.settings.device.startswith("cuda") else CPU_SLACK_US
        burst_us, start_burst_us, noise_us = bursts.candidate_us, bursts.start_us, bursts.noise_us
        seen = max(burst_us - noise_us / 2, 0.0) / max(start_burst_us + noise_us / 2, 1e-3)
        floor_us = start.median_us * seen * (1 - WALL_TOLERANCE) - slack if calibrated else 0.0
        floor_us = max(floor_us, own_floor_us)
        if mine.median_us < floor_us:
            raise TimingDisagreement(
                Status.REJECTED,
                f"reported times disagree with the batch's wall time on shape {shape.label}: "
                f"{mine.median_us:.2f} us per call reported against {start.median_us:.2f} us "
                f"for the starting kernel, while by the judge's clock their calls back to back "
                f"took {burst_us:.2f} and {start_burst_us:.2f} us each (at least "
                f"{floor_us:.2f} us expected; no call of this shape takes less than "
                f"{own_floor_us:.2f} us on this machine)", [ShapeResult(shape=shape.label)])


def _deferred(batch: dict[str, Any], returned: list[tuple[int, int, tuple, tuple]],
              shape: Shape) -> None:
    """Each returned copy's outputs, as the judge reads them after the device-wide synchronize,
    against their fingerprint taken right after the timed call returned (REJECTED on a
    difference: work on the outputs went on past the timed interval)."""
    prints = batch.get("fingerprints")
    if not isinstance(prints, dict):
        raise malformed("fingerprints must map the returned copies to lists", shape.label)
    for copy, _index, outputs, _inputs in returned:
        reported = prints.get(str(copy))
        if not isinstance(reported, list) or len(reported) != len(outputs) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in reported):
            raise malformed(f"no fingerprint of returned copy {copy}", shape.label)
        now = [int(v) for v in fingerprint(outputs).tolist()]
        if now != reported:
            changed = next(i for i, (a, b) in enumerate(zip(now, reported, strict=True)) if a != b)
            raise CandidateFault(
                Status.REJECTED,
                f"deferred work on shape {shape.label}: output {changed} of timed copy {copy} "
                f"changed after its timed call had returned (fingerprinted right after the "
                f"call and again after the final synchronise): work left running past the "
                f"timed interval is not measured", [ShapeResult(shape=shape.label)])
