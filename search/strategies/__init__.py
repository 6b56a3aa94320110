"""Search strategies: one module each, named as ``search.strategy`` names it.

``make_strategy`` imports the module ``Population.strategy`` names and builds its ``STRATEGY``;
``STRATEGIES`` lists the modules found here (every one but ``base`` and ``novelty``, which
every strategy shares), so a new module is a new strategy.
"""

from __future__ import annotations

import importlib
import pkgutil

from ..archive import Archive
from ..population import Population
from .base import Strategy
from .novelty import Rejection

_NOT_STRATEGIES = {"base", "novelty"}
STRATEGIES = tuple(sorted(m.name for m in pkgutil.iter_modules(__path__)
                          if m.name not in _NOT_STRATEGIES))


def make_strategy(population: Population, archive: Archive) -> Strategy:
    """The strategy ``population`` names, over the run's ``archive``."""
    if population.strategy not in STRATEGIES:
        raise ValueError(f"unknown search strategy {population.strategy!r}: the strategies are "
                         f"{', '.join(STRATEGIES)}")
    module = importlib.import_module(f"{__name__}.{population.strategy}")
    strategy = module.STRATEGY(population, archive)
    if not isinstance(strategy, Strategy):
        raise TypeError(f"search/strategies/{population.strategy}.py: STRATEGY is not a Strategy")
    return strategy


__all__ = ["STRATEGIES", "Rejection", "Strategy", "make_strategy"]
