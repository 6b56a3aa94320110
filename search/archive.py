"""The archive: every lineage's island and the global elites, deduplicated by candidate id."""

from __future__ import annotations

from dataclasses import dataclass, field

from .candidate import Candidate
from .evaluation import Evaluation


@dataclass
class Island:
    """One lineage's population, best first."""

    lineage: int
    members: list[tuple[Candidate, Evaluation]] = field(default_factory=list)
    size: int = 8

    def add(self, candidate: Candidate, evaluation: Evaluation) -> None:
        if not evaluation.ok or any(c.id == candidate.id for c, _ in self.members):
            return
        self.members.append((candidate, evaluation))
        self.members.sort(key=lambda m: m[1].speedup, reverse=True)
        del self.members[self.size:]

    @property
    def best(self) -> tuple[Candidate, Evaluation] | None:
        return self.members[0] if self.members else None


class Archive:
    """Per-lineage islands plus the global elite set. The global best is never dropped."""

    def __init__(self, elites: int = 8, island_size: int = 8) -> None:
        self.islands: dict[int, Island] = {}
        self.elites: list[tuple[Candidate, Evaluation]] = []
        self.evaluations: dict[str, Evaluation] = {}
        self._elite_size = elites
        self._island_size = island_size

    def add(self, candidate: Candidate, evaluation: Evaluation) -> None:
        self.evaluations.setdefault(candidate.id, evaluation)
        island = self.islands.setdefault(
            candidate.lineage, Island(candidate.lineage, size=self._island_size))
        island.add(candidate, evaluation)
        if evaluation.ok and all(c.id != candidate.id for c, _ in self.elites):
            self.elites.append((candidate, evaluation))
            self.elites.sort(key=lambda m: m[1].speedup, reverse=True)
            del self.elites[self._elite_size:]

    def seen(self, candidate_id: str) -> Evaluation | None:
        return self.evaluations.get(candidate_id)

    @property
    def best(self) -> tuple[Candidate, Evaluation] | None:
        return self.elites[0] if self.elites else None

    def lineage_best(self, lineage: int) -> tuple[Candidate, Evaluation] | None:
        island = self.islands.get(lineage)
        return island.best if island else None
