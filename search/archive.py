"""The archive: one island per lineage, the global elites, migration between islands.

Every evaluated candidate is kept once (by id, and by compiled binary where the evaluator
reports one in ``resources["binary"]``). Islands hold each lineage's best kernels, including
migrants received from other islands; the global elites hold the best kernels of the whole run
and never drop the global best.

Diversity: each kernel has a *family*, the hash of its source alone (two candidates of one
family differ only in knob values). Migration prefers elites of a family the receiving island
does not hold, and ``diversity()`` is the share of distinct families among the islands' bests,
so a run whose lineages all collapsed onto one kernel reads 1 / lineages.

Several languages (``Migration.languages``): lineage ``i`` searches ``languages[i % n]``;
kernels move only between islands of one language (a cuda lineage never receives a triton
source), and the global elites rank every kernel by its speedup over the first language's
starting kernel (``LanguageScales``, search/archive_languages.py), keeping each language's best.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache

from .archive_languages import LanguageScales
from .candidate import Candidate
from .evaluation import Evaluation

Member = tuple[Candidate, Evaluation]
TOPOLOGIES = ("ring", "all", "random")


def source_family(candidate: Candidate) -> str:
    """Candidates sharing a family differ only in knob values."""
    return _family(candidate.language, candidate.source)


@lru_cache(maxsize=1 << 16)  # diversity() asks for every lineage's best on every record
def _family(language: str, source: str) -> str:
    return hashlib.sha256(f"{language}\0{source}".encode()).hexdigest()[:12]


def _best_first(members: list[Member], scales: LanguageScales | None = None) -> None:
    """Sort by speedup (over the reference starting kernel, with ``scales``), best first."""
    def rank(m: Member) -> float:
        return scales.speedup(*m) if scales is not None else m[1].speedup

    members.sort(key=lambda m: (-rank(m), m[0].id))  # ties broken by id: reproducible


@dataclass
class Island:
    """One lineage's population, best first: its own kernels and the migrants it received."""

    lineage: int
    members: list[Member] = field(default_factory=list)
    size: int = 8
    changes: int = field(default=0, compare=False)  # kernels kept so far: what caches key on

    def add(self, candidate: Candidate, evaluation: Evaluation) -> bool:
        """Keep a correct kernel among the best ``size``; True if it was kept."""
        if not evaluation.ok or any(c.id == candidate.id for c, _ in self.members):
            return False
        self.members.append((candidate, evaluation))
        _best_first(self.members)
        del self.members[self.size:]
        kept = any(c.id == candidate.id for c, _ in self.members)
        self.changes += kept
        return kept

    @property
    def best(self) -> Member | None:
        return self.members[0] if self.members else None

    def holds(self, candidate_id: str) -> bool:
        return any(c.id == candidate_id for c, _ in self.members)

    def families(self) -> set[str]:
        return {source_family(c) for c, _ in self.members}


@dataclass(frozen=True)
class Migration:
    """How elites move between islands: every ``interval`` steps of a lineage, up to ``count``
    kernels arrive from the islands ``topology`` names.

    - ``ring``: from the next lineage (by number, wrapping around);
    - ``all``: from the global elites (every other island);
    - ``random``: from one other island drawn with the seed (reproducible).
    """

    interval: int = 4
    count: int = 2
    topology: str = "ring"
    seed: int = 0
    # Lineage i searches languages[i % n]; migrants come only from lineages of its language.
    # Empty: one language (or none told), every island may receive from every other.
    languages: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.interval < 1 or self.count < 1:
            raise ValueError("Migration.interval and Migration.count must be >= 1")
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"Migration.topology must be one of {', '.join(TOPOLOGIES)}, "
                             f"got {self.topology!r}")

    def due(self, step: int) -> bool:
        """Whether a lineage's ``step`` is a migration step (every ``interval``, never 0)."""
        return step > 0 and step % self.interval == 0

    def language_of(self, lineage: int) -> str | None:
        """The language ``lineage`` searches, or None when the run does not say."""
        return self.languages[lineage % len(self.languages)] if self.languages and \
            lineage >= 0 else None


class Archive:
    """Per-lineage islands plus the global elite set. The global best is never dropped."""

    def __init__(self, elites: int = 8, island_size: int = 8) -> None:
        self.islands: dict[int, Island] = {}
        self.elites: list[Member] = []
        self.evaluations: dict[str, Evaluation] = {}
        self.binaries: dict[str, str] = {}  # binary hash -> the candidate id first evaluated
        self.migrations: list[tuple[int, int, str]] = []  # (from lineage, to lineage, id)
        # Each language's starting kernel (recorded under lineage -1), the first one the
        # reference every kernel is ranked against (search/archive_languages.py).
        self.starts: dict[str, Member] = {}
        self.scales = LanguageScales()
        self._elite_size = elites
        self._island_size = island_size
        # diversity() is asked for on every record, and one island changes at a time: per
        # lineage, its island's changes when last read and its best's family; and how many
        # lineages' bests each family holds.
        self._best_families: dict[int, tuple[int, str | None]] = {}
        self._family_counts: Counter[str] = Counter()

    def island(self, lineage: int) -> Island:
        return self.islands.setdefault(lineage, Island(lineage, size=self._island_size))

    def add(self, candidate: Candidate, evaluation: Evaluation) -> None:
        self.evaluations.setdefault(candidate.id, evaluation)
        binary = evaluation.resources.get("binary") if evaluation.resources else None
        if isinstance(binary, str) and binary:
            self.binaries.setdefault(binary, candidate.id)
        self.island(candidate.lineage).add(candidate, evaluation)
        if candidate.lineage < 0 and candidate.origin.role == "seed" and evaluation.ok \
                and candidate.language not in self.starts:
            self.starts[candidate.language] = (candidate, evaluation)
            try:
                self.scales = LanguageScales.of_starts(list(self.starts.values()))
            except ValueError:  # refused by the run before any lineage starts (Swarm.start)
                del self.starts[candidate.language]
            _best_first(self.elites, self.scales)  # a new language's scale moves its kernels
        if evaluation.ok and all(c.id != candidate.id for c, _ in self.elites):
            self.elites.append((candidate, evaluation))
            _best_first(self.elites, self.scales)
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

    def _elites_of(self, language: str) -> list[Member]:
        """The best kernels of one language (the global elites of a run of several languages
        may hold none of a slower language's)."""
        members = [m for island in self.islands.values() for m in island.members
                   if m[0].language == language and m[0].lineage == island.lineage]
        _best_first(members)
        return members[:self._elite_size]

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

    def lineage_best(self, lineage: int) -> Member | None:
        """The best kernel a lineage found itself (migrants it received do not count)."""
        island = self.islands.get(lineage)
        if island is None:
            return None
        return next(((c, e) for c, e in island.members if c.lineage == lineage), None)

    def migrate(self, to: int, migration: Migration, step: int) -> list[Member]:
        """Elites for lineage ``to`` at its ``step``-th migration; they join its island.

        Kernels the island already holds are skipped; among the rest, those of a family the
        island lacks come first (diversity), then by speedup.
        """
        sources = self._sources(to, migration, step)
        target = self.island(to)
        families = target.families()
        language = migration.language_of(to) or next(
            (c.language for c, _ in target.members if c.lineage == to), None)
        offered = [(c, e) for c, e in sources if not target.holds(c.id) and c.lineage != to
                   and language in (None, c.language)]
        offered.sort(key=lambda m: (source_family(m[0]) in families, -m[1].speedup, m[0].id))
        moved = offered[:migration.count]
        for candidate, evaluation in moved:
            target.add(candidate, evaluation)
            self.migrations.append((candidate.lineage, to, candidate.id))
        _best_first(moved)
        return moved

    def _sources(self, to: int, migration: Migration, step: int) -> list[Member]:
        language = migration.language_of(to)
        others = sorted(i for i in self.islands if i != to and i >= 0
                        and migration.language_of(i) in (None, language))
        if not others or migration.topology == "all":
            elites = self.elites if language is None else self._elites_of(language)
            return [m for m in elites if m[0].lineage != to]
        if migration.topology == "ring":
            source = next((i for i in others if i > to), others[0])
        else:
            source = random.Random(f"{migration.seed}:{to}:{step}").choice(others)
        return [m for m in self.islands[source].members if m[0].lineage == source]

    def diversity(self) -> float:
        """Distinct source families among the lineages' own bests, over the lineages: 1.0 when
        every lineage's best is a different kernel, 1 / n when all share one."""
        for lineage, island in self.islands.items():
            known = self._best_families.get(lineage)
            if lineage < 0 or (known is not None and known[0] == island.changes):
                continue
            best = self.lineage_best(lineage)
            family = source_family(best[0]) if best is not None else None
            if known is not None and known[1] is not None:
                self._family_counts[known[1]] -= 1
                if not self._family_counts[known[1]]:
                    del self._family_counts[known[1]]
            if family is not None:
                self._family_counts[family] += 1
            self._best_families[lineage] = (island.changes, family)
        bests = self._family_counts.total()
        return len(self._family_counts) / bests if bests else 0.0
