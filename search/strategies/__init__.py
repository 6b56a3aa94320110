"""Search strategies: one module each, named as ``search.strategy`` names it.

``STRATEGIES`` lists the modules found here (every one but those every strategy shares:
``base``, ``novelty``, ``option``), so a new module is a new strategy. ``strategy_class`` is the
``STRATEGY`` a module defines, ``strategy_options`` the options each declares (what the
configuration's ``[search.<strategy>]`` tables hold), and ``make_strategy`` builds the one
``Population.strategy`` names.
"""

from __future__ import annotations

import importlib
import pkgutil

from ..archive import Archive
from ..population import Population
from .base import Strategy
from .novelty import Rejection
from .option import Option

_NOT_STRATEGIES = {"base", "novelty", "option"}
STRATEGIES = tuple(sorted(m.name for m in pkgutil.iter_modules(__path__)
                          if m.name not in _NOT_STRATEGIES))


def strategy_class(name: str) -> type[Strategy]:
    """The ``Strategy`` subclass search/strategies/<name>.py defines as ``STRATEGY``."""
    if name not in STRATEGIES:
        raise ValueError(f"unknown search strategy {name!r}: the strategies are "
                         f"{', '.join(STRATEGIES)}")
    found = getattr(importlib.import_module(f"{__name__}.{name}"), "STRATEGY", None)
    if not (isinstance(found, type) and issubclass(found, Strategy)):
        raise TypeError(f"search/strategies/{name}.py: STRATEGY is not a Strategy")
    return found


def strategy_options() -> dict[str, tuple[Option, ...]]:
    """The options every strategy declares, by strategy name."""
    return {name: strategy_class(name).options for name in STRATEGIES}


def make_strategy(population: Population, archive: Archive) -> Strategy:
    """The strategy ``population`` names, over the run's ``archive``."""
    return strategy_class(population.strategy)(population, archive)


__all__ = ["STRATEGIES", "Option", "Rejection", "Strategy", "make_strategy", "strategy_class",
           "strategy_options"]
