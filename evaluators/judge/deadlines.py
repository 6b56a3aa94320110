"""Time limits that grow with the bytes a problem moves: a 17 GB problem is not a hang.

``run_timeout_s`` (the run phase of one evaluation) and the runner's start-up limit are fixed
for small problems, but the protocol moves a problem's bytes many times (draws, copies in and
out of the arena, calls, comparisons, timed rounds), so on a KernelBench-size problem the fixed
limit would kill a correct kernel. The effective limit is the base plus the bytes the protocol
moves divided by a deliberately low bandwidth floor (``FLOOR_BYTES_PER_S``): far below what the
device does (a GPU moves TB/s; a page-locked host arena 10-25 GB/s; one CPU thread drawing
random numbers about 0.5 GB/s), so the allowance only lets the work finish and a real hang is
still stopped. For a small problem it is a small fraction of a second.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ...search import Shape, Task
from ..settings import EvaluatorSettings
from .timing import BURSTS

FLOOR_BYTES_PER_S = {"cuda": 10e9, "cpu": 0.5e9}
# A checked problem, per seed: three calls, each a copy in, the call and a copy back, and the
# judge's draws and comparisons
CHECK_PASSES = 12
# The runner's start-up, per tuning shape: a draw of the inputs, the outputs and one call
STARTUP_PASSES = 3


def timed_passes(settings: EvaluatorSettings) -> int:
    """Passes over a tuning shape's bytes while it is timed: two kernels, each warmed up, timed
    ``min_repeats`` rounds (more rounds are bounded by ``timing_budget_s``, which the base
    covers) and burst ``BURSTS`` times with a null burst, each sample a refresh of the inputs and
    a call (two passes); twice, as a disagreement is measured again."""
    return 2 * 2 * (settings.warmup + settings.min_repeats + 2 * BURSTS + 2) * 2


@dataclass(frozen=True)
class Deadline:
    """A limit: ``base_s`` (the setting named ``name``) plus ``moved_bytes`` at the floor."""

    name: str
    base_s: float
    moved_bytes: float
    floor_bytes_per_s: float

    @property
    def allowance_s(self) -> float:
        return self.moved_bytes / self.floor_bytes_per_s

    @property
    def seconds(self) -> float:
        return self.base_s + self.allowance_s

    def describe(self) -> str:
        """The limit and how it was set, for a TIMEOUT's message."""
        return (f"{self.seconds:.4g} s ({self.name}={self.base_s:g} s + {self.allowance_s:.3g} "
                f"s for the {self.moved_bytes / 1e9:.3g} GB the protocol moves, at a floor of "
                f"{self.floor_bytes_per_s / 1e9:g} GB/s)")


def scaled_limit(name: str, base_s: float, moved_bytes: float, device: str) -> Deadline:
    """``base_s`` plus ``moved_bytes`` at the device's bandwidth floor (the module's rule)."""
    floor = FLOOR_BYTES_PER_S["cuda" if device.startswith("cuda") else "cpu"]
    return Deadline(name, base_s, max(float(moved_bytes), 0.0), floor)


def _bytes(task: Task, shapes: Iterable[Shape]) -> float:
    """The roofline bytes of ``shapes`` together (a shape whose roofline the task cannot give
    counts nothing: the base covers it)."""
    total = 0.0
    for shape in shapes:
        try:
            total += task.roofline(shape)[0]
        except Exception:  # the task's own code refused the shape
            continue
    return total


def run_deadline(task: Task, settings: EvaluatorSettings,
                 extra: Iterable[Shape] = ()) -> Deadline:
    """The run phase's limit: ``run_timeout_s`` plus the checks of every checked shape (tuning,
    held-out when checked, the extra checks) and the timing of every tuning shape."""
    checked = [*task.tuning_shapes, *(task.heldout_shapes if settings.check_heldout else ()),
               *extra]
    moved = (CHECK_PASSES * settings.seeds * _bytes(task, checked)
             + timed_passes(settings) * _bytes(task, task.tuning_shapes))
    return scaled_limit("run_timeout_s", settings.run_timeout_s, moved, settings.device)


def startup_deadline(task: Task, settings: EvaluatorSettings, base_s: float) -> Deadline:
    """The runner's start-up limit: ``base_s`` plus its warm-up call on every tuning shape."""
    return scaled_limit("startup", base_s, STARTUP_PASSES * _bytes(task, task.tuning_shapes),
                        settings.device)
