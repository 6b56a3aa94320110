"""Islands: one population per lineage, the best kernels migrating between them.

Each lineage's island holds its best ``island_size`` kernels (its option), its own and the
migrants it received. On a migration step a lineage receives up to ``migration.count`` kernels from the
island its ``topology`` names (ring: the next lineage; random: one drawn with the seed; all: the
global elites). Kernels it already holds are skipped; among the rest, those of a source family
the island lacks come first (diversity), then by speedup. With several languages, kernels move
only between islands of one language.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from ..archive import Member, best_first, source_family
from ..candidate import Candidate
from ..evaluation import Evaluation
from .base import Strategy
from .option import Option


@dataclass
class Island:
    """One lineage's population, best first: its own kernels and the migrants it received."""

    lineage: int
    members: list[Member] = field(default_factory=list)
    size: int = 8

    def add(self, candidate: Candidate, evaluation: Evaluation) -> bool:
        """Keep a correct kernel among the best ``size``; True if it was kept."""
        if not evaluation.ok or self.holds(candidate.id):
            return False
        self.members.append((candidate, evaluation))
        best_first(self.members)
        del self.members[self.size:]
        return self.holds(candidate.id)

    @property
    def best(self) -> Member | None:
        return self.members[0] if self.members else None

    def holds(self, candidate_id: str) -> bool:
        return any(c.id == candidate_id for c, _ in self.members)

    def families(self) -> set[str]:
        return {source_family(c) for c, _ in self.members}


class Islands(Strategy):
    """One island per lineage; migration along a ring, at random, or from the elites."""

    name = "islands"
    options = (Option("island_size", int, 8, "kernels each lineage's island keeps (its own and "
                      "the migrants it received)", minimum=1),)

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.islands: dict[int, Island] = {}

    def island(self, lineage: int) -> Island:
        return self.islands.setdefault(lineage,
                                       Island(lineage, size=self.option("island_size")))

    def keep(self, candidate: Candidate, evaluation: Evaluation) -> None:
        self.island(candidate.lineage).add(candidate, evaluation)

    def restore(self, lineage: int, members: list[Member]) -> None:
        for candidate, evaluation in members:
            self.island(lineage).add(candidate, evaluation)

    def kept(self) -> list[Member]:
        seen: dict[str, Member] = {}
        for lineage in sorted(self.islands):
            if lineage >= 0:
                for member in self.islands[lineage].members:
                    seen.setdefault(member[0].id, member)
        return list(seen.values())

    def figures(self) -> dict[str, Any]:
        return {"islands": sum(1 for i in self.islands if i >= 0), "migrations": len(self.shared)}

    def select(self, lineage: int, step: int) -> list[Member]:
        migration = self.population.migration
        target = self.island(lineage)
        families = target.families()
        language = self.language_of(lineage)
        offered = [(c, e) for c, e in self._sources(lineage, step) if not target.holds(c.id)
                   and c.lineage != lineage and language in (None, c.language)]
        offered.sort(key=lambda m: (source_family(m[0]) in families, -m[1].speedup, m[0].id))
        moved = offered[:migration.count]
        for candidate, evaluation in moved:
            target.add(candidate, evaluation)
        best_first(moved)
        return moved

    def _sources(self, to: int, step: int) -> list[Member]:
        migration = self.population.migration
        language = migration.language_of(to)
        others = sorted(i for i in self.islands if i != to and i >= 0
                        and migration.language_of(i) in (None, language))
        if not others or migration.topology == "all":
            elites = self.archive.elites if language is None else self._elites_of(language)
            return [m for m in elites if m[0].lineage != to]
        if migration.topology == "ring":
            source = next((i for i in others if i > to), others[0])
        else:
            source = random.Random(f"{migration.seed}:{to}:{step}").choice(others)
        return [m for m in self.islands[source].members if m[0].lineage == source]

    def _elites_of(self, language: str) -> list[Member]:
        """The best kernels of one language (the global elites of a run of several languages
        may hold none of a slower language's)."""
        members = [m for island in self.islands.values() for m in island.members
                   if m[0].language == language and m[0].lineage == island.lineage]
        best_first(members)
        return members[:self.population.elites]


STRATEGY = Islands
