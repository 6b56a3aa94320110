"""The archive: every verdict of the run, the reference starting kernels and the global elites.

What every search strategy shares (search/strategies/): each evaluated candidate is kept once
(by id, and by compiled binary where the evaluator reports one in ``Evaluation.binary``); the
global elites hold the best kernels of the whole run and never drop the global best. Which kernels
a population keeps beyond that, and which a lineage is handed, is the strategy's.

Diversity: each kernel has a *family*, the hash of its source alone (two candidates of one
family differ only in knob values).

Several languages: the global elites rank every kernel by its speedup over the first language's
starting kernel (``LanguageScales``, search/archive_languages.py), keeping each language's best.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

from .archive_languages import LanguageScales
from .candidate import Candidate
from .evaluation import Evaluation, Status

Member = tuple[Candidate, Evaluation]


def source_family(candidate: Candidate) -> str:
    """Candidates sharing a family differ only in knob values."""
    return _family(candidate.language, candidate.source)


@lru_cache(maxsize=1 << 16)  # diversity() asks for every lineage's best on every record
def _family(language: str, source: str) -> str:
    return hashlib.sha256(f"{language}\0{source}".encode()).hexdigest()[:12]


def best_first(members: list[Member], scales: LanguageScales | None = None) -> None:
    """Sort by speedup (over the reference starting kernel, with ``scales``), best first."""
    def rank(m: Member) -> float:
        return scales.speedup(*m) if scales is not None else m[1].speedup

    members.sort(key=lambda m: (-rank(m), m[0].id))  # ties broken by id: reproducible


class Archive:
    """Every verdict, the reference starting kernels and the global elite set. The global best
    is never dropped."""

    def __init__(self, elites: int = 8) -> None:
        self.elites: list[Member] = []
        self.evaluations: dict[str, Evaluation] = {}
        self.binaries: dict[str, str] = {}  # binary hash -> the candidate id first evaluated
        # Each language's starting kernel (recorded under lineage -1), the first one the
        # reference every kernel is ranked against (search/archive_languages.py).
        self.starts: dict[str, Member] = {}
        self.scales = LanguageScales()
        self._elite_size = elites

    def add(self, candidate: Candidate, evaluation: Evaluation) -> None:
        known = self.evaluations.get(candidate.id)
        if known is None or (known.status is Status.SCREENED_OUT
                             and evaluation.status is not Status.SCREENED_OUT):
            self.evaluations[candidate.id] = evaluation  # a full verdict replaces a screened one
        if evaluation.binary:
            self.binaries.setdefault(evaluation.binary, candidate.id)
        if candidate.lineage < 0 and candidate.origin.role == "seed" and evaluation.ok \
                and candidate.language not in self.starts:
            self.starts[candidate.language] = (candidate, evaluation)
            try:
                self.scales = LanguageScales.of_starts(list(self.starts.values()))
            except ValueError:  # refused by the run before any lineage starts (Swarm.start)
                del self.starts[candidate.language]
            best_first(self.elites, self.scales)  # a new language's scale moves its kernels
        if evaluation.ok and all(c.id != candidate.id for c, _ in self.elites):
            self.elites.append((candidate, evaluation))
            best_first(self.elites, self.scales)
            best = self.elites[0]
            self._trim_elites()
            assert self.elites[0] is best  # the global best is never dropped

    def _trim_elites(self) -> None:
        """Keep the best ``elites`` kernels, and each language's best kernel a lineage found
        (its report and confirmation need it however the other languages fare)."""
        kept = self.elites[:self._elite_size]
        found = {c.language for c, _ in kept if c.lineage >= 0}
        for member in self.elites[self._elite_size:]:
            if member[0].lineage >= 0 and member[0].language not in found:
                kept.append(member)
                found.add(member[0].language)
        self.elites = kept

    def measure(self, member: Member) -> float:
        """A kernel's speedup over the reference starting kernel (its own speedup in a run of
        one language): what kernels of different languages are ranked by."""
        return self.scales.speedup(*member)

    def seen(self, candidate_id: str) -> Evaluation | None:
        return self.evaluations.get(candidate_id)

    def seen_binary(self, binary: str) -> tuple[str, Evaluation] | None:
        """The first candidate evaluated with this compiled binary, and its verdict."""
        first = self.binaries.get(binary)
        return (first, self.evaluations[first]) if first is not None else None

    @property
    def best(self) -> Member | None:
        return self.elites[0] if self.elites else None
