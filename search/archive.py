"""The archive: one island per lineage, the global elites, migration between islands.

Every evaluated candidate is kept once (by id, and by compiled binary where the evaluator
reports one in ``resources["binary"]``). Islands hold each lineage's best kernels, including
migrants received from other islands; the global elites hold the best kernels of the whole run
and never drop the global best.

Diversity: each kernel has a *family*, the hash of its source alone (two candidates of one
family differ only in knob values). Migration prefers elites of a family the receiving island
does not hold, and ``diversity()`` is the share of distinct families among the islands' bests,
so a run whose lineages all collapsed onto one kernel reads 1 / lineages.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from functools import lru_cache

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


def _best_first(members: list[Member]) -> None:
    members.sort(key=lambda m: (-m[1].speedup, m[0].id))  # ties broken by id: reproducible


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

    def __post_init__(self) -> None:
        if self.interval < 1 or self.count < 1:
            raise ValueError("Migration.interval and Migration.count must be >= 1")
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"Migration.topology must be one of {', '.join(TOPOLOGIES)}, "
                             f"got {self.topology!r}")


class Archive:
    """Per-lineage islands plus the global elite set. The global best is never dropped."""

    def __init__(self, elites: int = 8, island_size: int = 8) -> None:
        self.islands: dict[int, Island] = {}
        self.elites: list[Member] = []
        self.evaluations: dict[str, Evaluation] = {}
        self.binaries: dict[str, str] = {}  # binary hash -> the candidate id first evaluated
        self.migrations: list[tuple[int, int, str]] = []  # (from lineage, to lineage, id)
        self._elite_size = elites
        self._island_size = island_size
        # diversity() is asked for on every record; islands change far less often.
        self._diversity: tuple[tuple[tuple[int, int], ...], float] = ((), 0.0)

    def island(self, lineage: int) -> Island:
        return self.islands.setdefault(lineage, Island(lineage, size=self._island_size))

    def add(self, candidate: Candidate, evaluation: Evaluation) -> None:
        self.evaluations.setdefault(candidate.id, evaluation)
        binary = evaluation.resources.get("binary") if evaluation.resources else None
        if isinstance(binary, str) and binary:
            self.binaries.setdefault(binary, candidate.id)
        self.island(candidate.lineage).add(candidate, evaluation)
        if evaluation.ok and all(c.id != candidate.id for c, _ in self.elites):
            self.elites.append((candidate, evaluation))
            _best_first(self.elites)
            best = self.elites[0]
            del self.elites[self._elite_size:]
            assert self.elites[0] is best  # the global best is never dropped

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
        offered = [(c, e) for c, e in sources if not target.holds(c.id) and c.lineage != to]
        offered.sort(key=lambda m: (source_family(m[0]) in families, -m[1].speedup, m[0].id))
        moved = offered[:migration.count]
        for candidate, evaluation in moved:
            target.add(candidate, evaluation)
            self.migrations.append((candidate.lineage, to, candidate.id))
        _best_first(moved)
        return moved

    def _sources(self, to: int, migration: Migration, step: int) -> list[Member]:
        others = sorted(i for i in self.islands if i != to and i >= 0)
        if not others:
            return [m for m in self.elites if m[0].lineage != to]
        if migration.topology == "all":
            return [m for m in self.elites if m[0].lineage != to]
        if migration.topology == "ring":
            source = next((i for i in others if i > to), others[0])
        else:
            source = random.Random(f"{migration.seed}:{to}:{step}").choice(others)
        return [m for m in self.islands[source].members if m[0].lineage == source]

    def diversity(self) -> float:
        """Distinct source families among the lineages' own bests, over the lineages: 1.0 when
        every lineage's best is a different kernel, 1 / n when all share one."""
        key = tuple((i, island.changes) for i, island in self.islands.items())
        if key != self._diversity[0]:
            self._diversity = (key, self._measure_diversity())
        return self._diversity[1]

    def _measure_diversity(self) -> float:
        bests = [self.lineage_best(i) for i in self.islands if i >= 0]
        bests = [b for b in bests if b is not None]
        if not bests:
            return 0.0
        return len({source_family(c) for c, _ in bests}) / len(bests)
