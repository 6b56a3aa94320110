"""Confirming a search's best: the few fastest kernels judged again before one is reported.

A search keeps the fastest of many measurements, and the fastest measurement of several
near-equal kernels is, on average, a lucky one: the figure a search finds is biased upward, and a
later ``kernelswarm eval`` of the same file reads lower. So when the search ends, its ``top``
kernels are evaluated ``repeats`` more times each (fresh runners, the same judge and settings,
no search running beside them). The kernel with the best median is reported, with the median
evaluation's figures and the spread of the repeats. A kernel that fails any repeat is out: a
verdict that holds only sometimes is no verdict.

Kernels of several languages are compared by their medians' speedups over the reference
language's starting kernel (``LanguageScales``); each language's own best is confirmed too, so
that what is reported per language is a confirmed figure as well.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .archive_languages import LanguageScales
from .candidate import Candidate
from .evaluation import Evaluation


def median_evaluation(evaluations: Sequence[Evaluation]) -> Evaluation:
    """Of several evaluations of one kernel: the first that failed, if any (a kernel that fails
    once is not OK), else the one whose speedup is the median (the lower middle one of an even
    count)."""
    failed = next((e for e in evaluations if not e.ok), None)
    if failed is not None:
        return failed
    return sorted(evaluations, key=lambda e: e.speedup)[(len(evaluations) - 1) // 2]


@dataclass(frozen=True)
class Confirmed:
    """A kernel the search found, with the figure it was found at and its re-evaluations."""

    candidate: Candidate
    found: Evaluation  # the search's own evaluation
    repeats: tuple[Evaluation, ...]

    @property
    def ok(self) -> bool:
        return bool(self.repeats) and all(e.ok for e in self.repeats)

    @property
    def median(self) -> Evaluation | None:
        """The repeat whose speedup is the median (the lower middle one of an even count); None
        unless every repeat is OK."""
        return median_evaluation(self.repeats) if self.ok else None

    def spread(self, figure: str = "speedup") -> tuple[float, float]:
        """The lowest and highest ``figure`` over the repeats."""
        values = [getattr(e, figure) for e in self.repeats]
        return min(values), max(values)

    def failure(self) -> str:
        """Why a repeat failed (the first failing one's verdict), or "" when none did."""
        bad = next((e for e in self.repeats if not e.ok), None)
        if bad is None:
            return "" if self.repeats else "not re-evaluated"
        return f"{bad.status.value}: {bad.message}"

    def as_dict(self) -> dict[str, Any]:
        median = self.median
        return {"candidate_id": self.candidate.id,
                "found_speedup_vs_start": self.found.speedup,
                "found_speedup_vs_best": self.found.speedup_vs_best,
                "speedup_vs_start": [e.speedup for e in self.repeats],
                "speedup_vs_best": [e.speedup_vs_best for e in self.repeats],
                "median_speedup_vs_start": median.speedup if median else None,
                "failure": self.failure() or None}


def choose(confirmed: Sequence[Confirmed],
           scales: LanguageScales | None = None) -> Confirmed | None:
    """The kernel with the highest median speedup among those every repeat judged OK (over the
    reference starting kernel, with ``scales``: kernels of several languages); ties go to the
    one the search ranked first."""
    passing = [c for c in confirmed if c.ok]
    if not passing:
        return None
    scales = scales or LanguageScales()
    # max keeps the first of equals
    return max(passing, key=lambda c: scales.speedup(c.candidate, c.median))


@dataclass(frozen=True)
class Confirmation:
    """The outcome of confirming a search's best kernels; ``chosen`` is None when none held."""

    repeats: int
    kernels: tuple[Confirmed, ...]
    chosen: Confirmed | None
    wall_s: float
    skipped: str = ""  # why no confirmation ran (interrupted, turned off), else ""
    scales: LanguageScales = field(default_factory=LanguageScales)  # how kernels of several languages were ranked

    def best(self) -> tuple[Candidate, Evaluation] | None:
        """The kernel to report with the evaluation to report it by (its median repeat)."""
        if self.chosen is None:
            return None
        return self.chosen.candidate, self.chosen.median

    def chosen_in(self, language: str) -> Confirmed | None:
        """The confirmed kernel of ``language`` with the best median, or None (none of its
        kernels was judged again, or none held up)."""
        return choose([k for k in self.kernels if k.candidate.language == language], self.scales)

    def as_dict(self) -> dict[str, Any]:
        doc = {"repeats": self.repeats, "wall_s": self.wall_s, "skipped": self.skipped or None,
               "chosen": self.chosen.candidate.id if self.chosen else None,
               "kernels": [{**k.as_dict(), "language": k.candidate.language} for k in self.kernels]}
        if self.scales.several:
            doc["median_speedup_vs_reference"] = {
                k.candidate.id: self.scales.speedup(k.candidate, k.median) if k.median else None
                for k in self.kernels}
        return doc
