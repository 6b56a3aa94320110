"""The islands strategy over its archive, driven as the tracker drives them, with the migration
settings given per call (the tests of migration vary them)."""

from __future__ import annotations

import dataclasses

from kernelswarm.search import Archive, Candidate, Evaluation, Migration, Population
from kernelswarm.search.archive import Member
from kernelswarm.search.strategies import make_strategy
from kernelswarm.search.strategies.islands import Island, Islands


class IslandsArchive:
    def __init__(self, elites: int = 8, island_size: int = 8) -> None:
        self.archive = Archive(elites=elites)
        strategy = make_strategy(Population("islands", elites,
                                            options={"island_size": island_size}), self.archive)
        assert isinstance(strategy, Islands)
        self.strategy = strategy

    def add(self, candidate: Candidate, evaluation: Evaluation) -> None:
        self.archive.add(candidate, evaluation)
        self.strategy.add(candidate, evaluation)

    def migrate(self, to: int, migration: Migration, step: int) -> list[Member]:
        self.strategy.population = dataclasses.replace(self.strategy.population,
                                                       migration=migration)
        return self.strategy.share(to, step)

    def island(self, lineage: int) -> Island:
        return self.strategy.island(lineage)

    @property
    def islands(self) -> dict[int, Island]:
        return self.strategy.islands

    @property
    def migrations(self) -> list[tuple[int, int, str]]:
        return self.strategy.shared

    def lineage_best(self, lineage: int) -> Member | None:
        return self.strategy.own_best(lineage)

    def diversity(self) -> float:
        return self.strategy.diversity()

    def __getattr__(self, name: str):  # best, elites, seen, measure, scales, starts
        return getattr(self.archive, name)
