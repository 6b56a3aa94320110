"""Screening: a candidate timed first on a few representative shapes, and on the rest only if it
could beat its lineage's best.

Timing is most of a GPU evaluation, and most candidates of a search are slower than the best it
has. A ``Screen`` names the shapes timed first (spread over the task's sizes, by the best's
start times) and the bar on each: the lineage best's speedup over the starting kernel there,
with its confidence interval. After the screening shapes the judge asks ``drops``: a candidate
is screened out only when, on **every** screening shape, even the top of its own interval,
widened by ``margin``, stays below the bar's interval. One that could win a single screening
shape goes on to the full protocol (a dispatch table may want it for that shape).

A screened-out verdict is ``Status.SCREENED_OUT``: checked for correctness on every shape like
any other (the checks come before timing), timed on the screening shapes only; it is never a
best, an elite or a confirmation's kernel, and no repair is asked for it. Its bar is that of the
lineage that asked: another lineage reuses it only where its own bar would drop it too
(``drops`` on the verdict's shapes), and judges it in full otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .evaluation import Evaluation, ShapeResult, Status

SCREEN_MARGIN = 0.05  # a candidate within 5% of the bar on a shape is timed in full


@dataclass(frozen=True)
class Screen:
    """The shapes a candidate is timed on first and the bar it must be able to reach on one
    of them. ``bar``: (shape, speedup over the start, its 95% half-width or NaN) of the best;
    ``against``: the id of the candidate the bar is from (for messages)."""

    shapes: tuple[str, ...]
    bar: tuple[tuple[str, float, float], ...]
    margin: float = SCREEN_MARGIN
    against: str = ""

    def __post_init__(self) -> None:
        known = {label for label, _, _ in self.bar}
        if not self.shapes or any(label not in known for label in self.shapes):
            raise ValueError(f"a screen's shapes must be among its bar's, got {self.shapes!r}")
        if not 0 <= self.margin < 1:
            raise ValueError(f"a screen's margin must be in [0, 1), got {self.margin!r}")

    @classmethod
    def of(cls, best: Evaluation, count: int, margin: float = SCREEN_MARGIN,
           against: str = "") -> Screen | None:
        """A screen of ``count`` shapes against ``best`` (an OK evaluation), or None where
        there is nothing to save (``count`` 0, or at least as many as the shapes) or no bar on
        some shape. The shapes are spread evenly over the best's shapes ordered by the starting
        kernel's time there (smallest, largest and between: the task's sizes; one shape: the
        median one)."""
        shapes = best.shapes
        if count <= 0 or not best.ok or len(shapes) <= count:
            return None
        if any(not (s.speedup_vs_start > 0 and s.start_time_us > 0) for s in shapes):
            return None
        by_size = sorted(shapes, key=lambda s: s.start_time_us)
        picked = ([by_size[len(by_size) // 2]] if count == 1 else
                  [by_size[round(i * (len(by_size) - 1) / (count - 1))] for i in range(count)])
        return cls(tuple(dict.fromkeys(s.shape for s in picked)),
                   tuple((s.shape, s.speedup_vs_start, s.speedup_vs_start_ci) for s in shapes),
                   margin, against)

    def bar_of(self, label: str) -> tuple[float, float]:
        return next((speedup, ci) for shape, speedup, ci in self.bar if shape == label)

    def could_beat(self, result: ShapeResult) -> bool:
        """Whether ``result`` (a screening shape, timed) could reach the bar on its shape: the
        top of its interval, widened by the margin, at or above the bottom of the bar's."""
        bar, bar_ci = self.bar_of(result.shape)
        mine, ci = result.speedup_vs_start, result.speedup_vs_start_ci
        if not mine > 0:
            return True  # not timed: nothing says it is slower
        top = mine * (1 + self.margin) + (ci if ci > 0 else 0.0)
        return top >= bar - (bar_ci if bar_ci > 0 else 0.0)

    def drops(self, results: Sequence[ShapeResult]) -> bool:
        """Whether the candidate whose shape results these are is screened out: every screening
        shape is among them, timed, and none could reach the bar."""
        by_shape = {r.shape: r for r in results}
        return all(label in by_shape and not self.could_beat(by_shape[label])
                   for label in self.shapes)

    def message(self, results: Sequence[ShapeResult], untimed: int) -> str:
        """The verdict's words: each screening shape's figure against the bar."""
        by_shape = {r.shape: r for r in results}
        parts = []
        for label in self.shapes:
            bar, _ = self.bar_of(label)
            parts.append(f"{label}: {by_shape[label].speedup_vs_start:.3f}x vs {bar:.3f}x")
        against = f" ({self.against[:12]})" if self.against else ""
        return (f"screened out: slower than its lineage's best{against} beyond noise on each "
                f"of the {len(self.shapes)} screening shapes over the starting kernel "
                f"({'; '.join(parts)}); correct on every shape, the other {untimed} not timed")


def screened_speedup(evaluation: Evaluation, best: Evaluation) -> float:
    """What a screened-out verdict's speedup over the start would be on every shape if it
    kept, on the shapes it was not timed on, the ratio to ``best`` (the bar's evaluation) it
    has on those it was: ``best.speedup`` times the geometric mean of its ratios to ``best`` on
    its timed shapes. Below the best's own, as it was slower there; what a tuner is told of it
    (a slower kernel, not a failure). 0 for any other verdict or without a ratio."""
    if evaluation.status is not Status.SCREENED_OUT or not best.ok:
        return 0.0
    bars = {s.shape: s.speedup_vs_start for s in best.shapes}
    ratios = [s.speedup_vs_start / bars[s.shape] for s in evaluation.shapes
              if s.speedup_vs_start > 0 and bars.get(s.shape, 0.0) > 0]
    if not ratios:
        return 0.0
    return best.speedup * math.exp(sum(math.log(r) for r in ratios) / len(ratios))
