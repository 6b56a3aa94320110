"""The search-strategy interface: how a population keeps, selects and shares kernels.

The tracker (search/tracker.py, and through it the Ray tracker actor) calls only this
interface. Every strategy is handed each judged kernel (``keep``), is asked which kernels a
lineage receives on its migration steps (``select``), and may refuse a candidate before it is
judged (``admit``: novelty rejection, the same for every strategy). What is common to all of
them, the global elites, the reference starting kernels and the record of every verdict, is
the run's ``Archive`` (search/archive.py), which the strategy reads and never changes.

A strategy is a module of this package that defines ``STRATEGY``, a subclass of ``Strategy``;
its name is the module's, and its own settings are the ``Option`` s its class's ``options``
declares (the configuration's ``[search.<name>]`` table). docs/architecture.md, "Adding a search
strategy", walks through one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from typing import Any, ClassVar

from ..archive import Archive, Member, source_family
from ..candidate import Candidate
from ..evaluation import Evaluation
from ..population import Population
from .novelty import Novelty, Rejection
from .option import Option


class Strategy(ABC):
    """A population's rules. Not thread-safe: the tracker calls it under its lock.

    ``options`` declares the strategy's own settings; ``Population.options`` may give any of
    them (the others take their defaults) and nothing else, else ``ValueError`` names it."""

    name: ClassVar[str] = ""
    options: ClassVar[tuple[Option, ...]] = ()

    def __init__(self, population: Population, archive: Archive) -> None:
        self.population = population
        self.archive = archive
        declared = {option.name: option for option in self.options}
        unknown = sorted(set(population.options) - set(declared))
        if unknown:
            raise ValueError(f"{self.name} has no option {', '.join(map(repr, unknown))}; its "
                             f"options: {', '.join(declared) or 'none'}")
        self._options: dict[str, Any] = {}
        for name, option in declared.items():
            try:
                self._options[name] = option.check(population.options.get(name, option.default))
            except ValueError as exc:
                raise ValueError(f"{self.name} option {name} {exc}") from None
        self.shared: list[tuple[int, int, str]] = []  # (from lineage, to lineage, kernel id)
        self.novelty = Novelty(population.novelty)
        # Each lineage's own best kernel (what it found itself), and how many lineages' bests
        # each source family is: diversity() is asked for on every record.
        self._own_best: dict[int, Member] = {}
        self._families: Counter[str] = Counter()

    # -- what every strategy must decide -------------------------------------------------

    @abstractmethod
    def keep(self, candidate: Candidate, evaluation: Evaluation) -> None:
        """Take a judged kernel (any verdict; the archive holds it already)."""

    @abstractmethod
    def select(self, lineage: int, step: int) -> list[Member]:
        """The kernels ``lineage`` receives at ``step``, a migration step (at most
        ``population.migration.count``, never its own, never one it holds); each is noted in
        ``shared`` by the caller."""

    @abstractmethod
    def kept(self) -> list[Member]:
        """The kernels the population holds now (for reports and the strategy comparison)."""

    def restore(self, lineage: int, members: list[Member]) -> None:
        """Kernels handed to ``lineage`` before a restart: hold them as ``select`` did."""
        del lineage, members  # a strategy that remembers nothing of them needs nothing back

    def figures(self) -> dict[str, Any]:
        """The strategy's own figures for progress views and summaries (name -> number)."""
        return {}

    # -- the same for every strategy -------------------------------------------------------

    def option(self, name: str) -> Any:
        """The value of the declared option ``name``: the population's, else its default."""
        return self._options[name]

    def add(self, candidate: Candidate, evaluation: Evaluation) -> None:
        """A judged kernel: novelty's index, the lineage's own best, then ``keep``."""
        self.novelty.judged(candidate)
        lineage = candidate.lineage
        if evaluation.ok and lineage >= 0:
            known = self._own_best.get(lineage)
            if known is None or (evaluation.speedup, known[0].id) > (known[1].speedup,
                                                                      candidate.id):
                if known is not None:
                    self._drop_family(source_family(known[0]))
                self._own_best[lineage] = (candidate, evaluation)
                self._families[source_family(candidate)] += 1
        self.keep(candidate, evaluation)

    def _drop_family(self, family: str) -> None:
        self._families[family] -= 1
        if not self._families[family]:
            del self._families[family]

    def share(self, lineage: int, step: int) -> list[Member]:
        """``select``, noted in ``shared``; nothing on a step that is not a migration step."""
        if not self.population.migration.due(step):
            return []
        moved = self.select(lineage, step)
        self.shared.extend((c.lineage, lineage, c.id) for c, _ in moved)
        return moved

    def restored(self, lineage: int, members: list[Member]) -> None:
        """Kernels handed out before a restart, back where they went (``restore``)."""
        self.restore(lineage, members)
        self.shared.extend((c.lineage, lineage, c.id) for c, _ in members)

    def admit(self, candidate: Candidate) -> Rejection | None:
        """Why ``candidate`` is not to be judged (too close to a judged kernel), or None."""
        return self.novelty.check(candidate)

    def own_best(self, lineage: int) -> Member | None:
        """The best kernel ``lineage`` found itself (kernels it received do not count)."""
        return self._own_best.get(lineage)

    def diversity(self) -> float:
        """Distinct source families among the lineages' own bests, over the lineages: 1.0 when
        every lineage's best is a different kernel, 1 / n when all share one."""
        bests = self._families.total()
        return len(self._families) / bests if bests else 0.0

    def language_of(self, lineage: int) -> str | None:
        """The language ``lineage`` searches: the run's rotation, else its own kernels'."""
        told = self.population.migration.language_of(lineage)
        if told is not None:
            return told
        own = self._own_best.get(lineage)
        return own[0].language if own is not None else None
