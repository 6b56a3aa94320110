"""How a run's population is kept and shared: the settings every search strategy reads.

A *strategy* (search/strategies/) decides which judged kernels a population keeps, which of
them a lineage is handed, and which candidates are not judged at all (novelty rejection).
``Population`` names the strategy and holds the settings common to all of them; a strategy's
own settings come in ``options``, as the strategy declares them (``Strategy.options``; the
configuration's ``[search.<strategy>]`` table).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

TOPOLOGIES = ("ring", "all", "random")


@dataclass(frozen=True)
class Migration:
    """When kernels move to a lineage: every ``interval`` steps, up to ``count`` of them. Which
    ones is the strategy's choice; the islands strategy takes them from the island
    ``topology`` names:

    - ``ring``: from the next lineage (by number, wrapping around);
    - ``all``: from the global elites (every other island);
    - ``random``: from one other island drawn with the seed (reproducible).
    """

    interval: int = 4
    count: int = 2
    topology: str = "ring"
    seed: int = 0
    # Lineage i searches languages[i % n]; kernels reach it only from lineages of its language.
    # Empty: one language (or none told), every lineage may receive from every other.
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


@dataclass(frozen=True)
class Population:
    """The run's search strategy and its settings.

    - ``strategy``: a module of search/strategies/ (``islands``, ``map_elites``);
    - ``elites``: the global elites kept whatever the strategy (reports, confirmation);
    - ``migration``: when lineages are handed kernels, and how many;
    - ``novelty``: source similarity at or above which a coder's candidate is not judged
      (search/strategies/novelty.py); 1.0 rejects only copies that differ in comments and
      layout; 0 turns novelty rejection off;
    - ``options``: the strategy's own settings, by name (any it declares; the others take
      their defaults).
    """

    strategy: str = "islands"
    elites: int = 8
    migration: Migration = field(default_factory=Migration)
    novelty: float = 0.0
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.elites < 1:
            raise ValueError("Population.elites must be >= 1")
        if not 0.0 <= self.novelty <= 1.0:
            raise ValueError(f"Population.novelty is a similarity in [0, 1] (0: off), got "
                             f"{self.novelty}")
