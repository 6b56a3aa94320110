"""Ranking kernels of several languages on one scale.

A candidate's speedup is measured against the starting kernel *of its own language*, timed
alongside it: the ratio is robust to a drifting machine, but a triton kernel's 1.3x and a cuda
kernel's 1.5x say nothing about which is faster when the two starting kernels differ. So a run
with several languages states every kernel against one reference, the starting kernel of its
first language: per shape, a kernel's time is its own starting kernel's time divided by its
speedup, and its speedup against the reference is the reference's time over that. The geometric
mean over shapes of ``speedup_vs_start * reference_us / own_start_us`` factors into the
kernel's speedup times one number per language, its *scale*: how much faster its starting
kernel was than the reference's, per shape, as both were measured when the run began.

Within a language the ranking is the measured ratio's (the scale is one constant); the
reference language's scale is 1, so a single-language run ranks exactly as before.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .candidate import Candidate
from .evaluation import Evaluation


def start_scale(reference: Evaluation, own: Evaluation) -> float:
    """Geometric mean over shapes of ``reference time / own time`` of two starting kernels'
    evaluations; NaN when a shape either lacks (untimed, failed, or not measured in both)."""
    if not (reference.ok and own.ok):
        return math.nan
    mine = {s.shape: s.time_us for s in own.shapes}
    ratios = [r.time_us / mine[r.shape] for r in reference.shapes
              if r.shape in mine and mine[r.shape] > 0 and r.time_us > 0]
    if not ratios or len(ratios) != len(reference.shapes) or len(mine) != len(ratios):
        return math.nan
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios))


@dataclass(frozen=True)
class LanguageScales:
    """Per language, the scale that turns a kernel's speedup over its own starting kernel into
    its speedup over the reference language's starting kernel (see the module docstring).
    A language without a scale (a single-language run, or its start not yet measured) counts 1."""

    reference: str = ""
    scales: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def of_starts(cls, starts: Sequence[tuple[Candidate, Evaluation]]) -> LanguageScales:
        """The scales from the starting kernels' evaluations, the reference language's first.
        ``ValueError`` when a start cannot be compared with the reference (not OK, or timed on
        other shapes): a run must not rank its languages on a guess."""
        if not starts:
            return cls()
        (ref_kernel, ref_eval), scales = starts[0], {}
        for candidate, evaluation in starts:
            scale = 1.0 if candidate.language == ref_kernel.language else \
                start_scale(ref_eval, evaluation)
            if not scale > 0:
                raise ValueError(f"the {candidate.language} starting kernel cannot be compared "
                                 f"with the {ref_kernel.language} one: both must be OK and timed "
                                 f"on the same shapes")
            scales[candidate.language] = scale
        return cls(ref_kernel.language, scales)

    @property
    def several(self) -> bool:
        """Whether kernels of more than one language are ranked."""
        return len(self.scales) > 1

    def scale(self, language: str) -> float:
        return self.scales.get(language, 1.0)

    def speedup(self, candidate: Candidate, evaluation: Evaluation) -> float:
        """``evaluation``'s speedup over the reference language's starting kernel (its
        geometric mean over shapes); 0 unless OK."""
        return evaluation.speedup * self.scale(candidate.language)

    def as_dict(self) -> dict[str, object]:
        return {"reference": self.reference, "scales": dict(self.scales)}
