"""The device memory of one evaluation, planned once per evaluator before any candidate.

KernelBench-size problems move F = 8-17 GB a call (inputs and outputs of a tuning shape), and an
evaluation used to hold about 12F at once: every (shape, seed) cached by the judge (~5F), an
arena of two returned copies (2F), the spare runner's own arena (2F) and the runner's timed
copies, two or more per kernel plus the first draw (~4.5F). The plan bounds that to about 5F:

- the judge's references are an LRU cache bounded by bytes (``References``): at most
  ``REFERENCE_SHARE`` of the device, less where the evaluation needs the room; a problem larger
  than the budget is computed when it is needed and not kept;
- a shape of at least twice the L2 gets one timed copy per kernel (``gpu_timing.plan_copies``:
  its own traffic evicts the L2, so it is cold anyway), and the arena holds one returned copy;
- no spare runner is started in advance where the evaluation and a spare would not both fit:
  the runner then starts when a candidate is taken, so two big arenas never coexist;
- a plan that cannot fit even so fails before any runner starts (``MemoryPlanError``), naming
  the bytes it needs and the bytes the device has.

The peak is estimated, per phase, from the problems' sizes (the judge's and the runner's
tensors, the arena, a CUDA context per process); the estimate is the rule's, not a measurement.
On the CPU nothing is planned (host memory; the problems there are small): the spare is always
started in advance and the references get ``CPU_REFERENCE_BUDGET``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ...search import TaskError
from ..measure.gpu_timing import plan_copies

GIB = 1 << 30
CPU_REFERENCE_BUDGET = 2 * GIB
REFERENCE_SHARE = 8  # at most an eighth of the device for the judge's cached references
USABLE_SHARE = 0.9  # what the driver and the allocators' fragmentation leave usable
# Spare runners preparing at once where they fit: a runner whose start-up takes longer than an
# evaluation (Triton's, whose profiler starts in it: ~5 s on an H200 against ~1.5 s a candidate)
# keeps the next candidates waiting unless several prepare side by side
SPARES_WANTED = 3
CONTEXT_BYTES = GIB  # a CUDA context and its allocator's slack, per process on the device
BASELINE_FOOTPRINTS = 3  # the calibration runner's baselines: the problem, eager's and compile's outputs


class MemoryPlanError(TaskError):
    """The task's problems do not fit the device even with the leanest plan."""


def device_memory_bytes(device: str) -> int:
    """The total memory of a CUDA ``device``; 0 on the CPU (nothing is planned there)."""
    if not device.startswith("cuda"):
        return 0
    import torch

    return int(torch.cuda.get_device_properties(torch.device(device)).total_memory)


def default_reference_budget(device: str) -> int:
    """The references' budget before the plan: an eighth of a GPU, ``CPU_REFERENCE_BUDGET``
    on the CPU."""
    total = device_memory_bytes(device)
    return total // REFERENCE_SHARE if total else CPU_REFERENCE_BUDGET


@dataclass(frozen=True)
class TimedProblem:
    """One tuning shape's bytes: its inputs and its outputs."""

    input_bytes: int
    output_bytes: int

    @property
    def footprint(self) -> int:
        return self.input_bytes + self.output_bytes


@dataclass(frozen=True)
class MemoryPlan:
    """What one evaluation holds on the device at its peak, and what follows from it.

    ``evaluation_bytes``: the peak of one evaluation, cached references apart;
    ``spare_bytes``: what a spare runner prepared in advance adds (``spares`` of them fit, up
    to ``SPARES_WANTED``); ``copies``: timed copies per kernel of the largest tuning shape (1
    above twice the L2)."""

    device_bytes: int
    usable_bytes: int
    footprint: int
    copies: int
    arena_bytes: int
    evaluation_bytes: int
    spare_bytes: int
    spare_in_advance: bool
    references_budget: int
    spares: int = 1  # spare runners that may prepare at once (each ``spare_bytes``)

    def metrics(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def spare_beside_calibration(self) -> bool:
        """Whether a spare may prepare while the calibration runner measures the baselines:
        those hold the problem and each baseline's outputs (eager, compile in each mode, about
        ``BASELINE_FOOTPRINTS`` footprints) beside the evaluation's own peak. Where it does not
        fit, the first spare starts once the calibration runner is gone."""
        if not self.device_bytes:
            return True
        return self.spare_in_advance and (self.evaluation_bytes + self.spare_bytes
                                          + BASELINE_FOOTPRINTS * self.footprint
                                          <= self.usable_bytes)


@dataclass(frozen=True)
class EvaluationSizes:
    """What the plan starts from: every tuning shape's bytes (``timed``), the largest checked
    problem's, the arena's, and the device's L2 (0 on the CPU)."""

    timed: Sequence[TimedProblem]
    checked_bytes: int
    arena_bytes: int
    l2_bytes: int

    @property
    def peak_bytes(self) -> int:
        """The peak of one evaluation on the device, per phase, the references' cache apart:

        - checks: the runner's buffers of a problem (1x) and, in the judge, the problem and
          what came back (2x);
        - timing: the runner's copies (2 kernels x copies x F) and the fresh draw of a refresh
          (the inputs), with, in the judge, a returned copy read back (F) and its re-derived
          inputs;

        plus the arena and a CUDA context each for the judge and the runner."""
        checks = 3 * self.checked_bytes
        timing = max((2 * plan_copies(p.footprint, self.l2_bytes).copies * p.footprint
                      + p.input_bytes + p.footprint + p.input_bytes for p in self.timed),
                     default=0)
        return self.arena_bytes + max(checks, timing) + 2 * CONTEXT_BYTES


def plan_memory(device_bytes: int, sizes: EvaluationSizes, reference_budget: int) -> MemoryPlan:
    """The plan on a device of ``device_bytes`` (0: the CPU, nothing planned).

    A spare runner (its arena, its warm-up draw of the largest tuning shape, its context) is
    started in advance only if it fits beside the evaluation's peak; the references get what is
    left, at most ``reference_budget``. ``MemoryPlanError`` if the peak alone does not fit.
    """
    timed, arena_bytes = sizes.timed, sizes.arena_bytes
    footprint = max((p.footprint for p in timed), default=0)
    copies = min((plan_copies(p.footprint, sizes.l2_bytes).copies for p in timed), default=1)
    peak = sizes.peak_bytes
    spare = arena_bytes + footprint + CONTEXT_BYTES
    if not device_bytes:
        return MemoryPlan(0, 0, footprint, copies, arena_bytes, peak, spare, True,
                          reference_budget, 1)
    usable = int(device_bytes * USABLE_SHARE)
    if peak > usable:
        raise MemoryPlanError(
            f"one evaluation needs about {peak / GIB:.1f} GiB of device memory at its peak "
            f"(arena {arena_bytes / GIB:.1f} GiB for problems of up to {footprint / GIB:.1f} "
            f"GiB, one timed copy per kernel, the judge's and the runner's buffers, "
            f"{2 * CONTEXT_BYTES / GIB:.0f} GiB of CUDA contexts) and the device has "
            f"{usable / GIB:.1f} GiB usable ({USABLE_SHARE:.0%} of {device_bytes / GIB:.1f} "
            f"GiB): use smaller tuning or held-out shapes, or a device with more memory")
    in_advance = peak + spare <= usable
    pool = max(1, min(SPARES_WANTED, (usable - peak) // spare)) if in_advance else 0
    left = usable - peak - pool * spare
    return MemoryPlan(device_bytes, usable, footprint, copies, arena_bytes, peak, spare,
                      in_advance, max(0, min(reference_budget, left)), pool)
