"""Confirming a search's best: the few fastest kernels judged again before one is reported.

A search keeps the fastest of many measurements, and the fastest measurement of several
near-equal kernels is, on average, a lucky one: the figure a search finds is biased upward, and a
later ``kernelswarm eval`` of the same file reads lower. So when the search ends, its ``top``
kernels are evaluated ``repeats`` more times each (fresh runners, the same judge and settings,
no search running beside them). The kernel with the best median is reported, with the median
evaluation's figures and the spread of the repeats. A kernel that fails any repeat is out: a
verdict that holds only sometimes is no verdict.

The repeats check correctness on secret seeds (``SecretSeeds``), not on the search's. During the
search every candidate is checked on the same fixed seeds (0 .. ``seeds`` - 1, on the tuning
shapes, the held-out shapes and the extra checks), and a search that keeps the best of many
candidates also keeps whichever happens to be right on exactly those inputs: a kernel that
hard-codes their answers, or one whose data-dependent bug they happen to miss. Timed calls
already run on inputs from a per-evaluation secret, and a sample of them is re-checked, so a
kernel wrong on unseen inputs of a tuning shape fails in the search itself; the held-out shapes
and the extra checks are never timed, and only new seeds test them on inputs nobody chose. The
seeds are drawn with the operating system's entropy (``random.SystemRandom``) when the
confirmation starts, in the driver, and go only to the evaluators judging the repeats: no
lineage, agent or tracker holds them before they are used. Every repeat of every kernel is
checked on the same ones (the evaluator computes each shape's reference for a seed once), and
the confirmation records them (``Confirmation.seeds``, summary.json's ``secret_seeds``) so that
a result can be reproduced once the run is over.

Kernels of several languages are compared by their medians' speedups over the reference
language's starting kernel (``LanguageScales``); each language's own best is confirmed too, so
that what is reported per language is a confirmed figure as well.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .archive_languages import LanguageScales
from .candidate import Candidate
from .evaluation import Evaluation

# Secret seeds are drawn from [SECRET_LOW, SECRET_HIGH): above every seed a search checks on
# (0 .. seeds - 1) and the judge's refill seed (evaluators/protocol.py: 7919), and within the
# range the judge's timed inputs already draw from (every task's ``make_inputs`` takes them).
SECRET_LOW = 1 << 32
SECRET_HIGH = 1 << 62
CHECK_SEEDS = "check_seeds"  # Evaluation.metrics: the seeds its correctness was checked on


@dataclass(frozen=True)
class SecretSeeds:
    """The seeds a confirmation checks correctness on, drawn when it starts (``draw``)."""

    values: tuple[int, ...]

    @classmethod
    def draw(cls, count: int) -> SecretSeeds:
        """``count`` distinct seeds from the operating system's entropy, none of them a seed a
        search checks on."""
        if count < 1:
            raise ValueError(f"a confirmation checks at least one secret seed, got {count}")
        draw, values = random.SystemRandom(), set()
        while len(values) < count:
            values.add(draw.randrange(SECRET_LOW, SECRET_HIGH))
        return cls(tuple(sorted(values)))

    def checked(self, evaluation: Evaluation) -> bool:
        """Whether ``evaluation``'s correctness was checked on these seeds (its evaluator
        records the seeds it used; one that draws no inputs of its own records none)."""
        used = evaluation.metrics.get(CHECK_SEEDS)
        return isinstance(used, (list, tuple)) and tuple(used) == self.values


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

    def as_dict(self, seeds: SecretSeeds | None = None) -> dict[str, Any]:
        """The kernel's figures; with ``seeds``, whether every repeat was checked on them."""
        median = self.median
        checked = {} if seeds is None else {
            "on_secret_seeds": bool(self.repeats) and all(seeds.checked(e) for e in self.repeats)}
        return {"candidate_id": self.candidate.id, **checked,
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
    # The secret seeds the repeats were checked on (drawn as the confirmation started); None
    # where none were drawn (a confirmation that did not run).
    seeds: SecretSeeds | None = None

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
               # the values, now that the run is over: a verdict on them can be reproduced
               "secret_seeds": list(self.seeds.values) if self.seeds else None,
               "kernels": [{**k.as_dict(self.seeds), "language": k.candidate.language}
                           for k in self.kernels]}
        if self.scales.several:
            doc["median_speedup_vs_reference"] = {
                k.candidate.id: self.scales.speedup(k.candidate, k.median) if k.median else None
                for k in self.kernels}
        return doc
