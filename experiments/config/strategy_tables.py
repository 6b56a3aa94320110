"""``[search.<strategy>]``: each search strategy's own options, as the strategy declares them.

The tables are made from ``Strategy.options`` (search/strategies/), one per strategy that
declares any, each value checked by its ``Option.check``; a strategy added to search/strategies/
brings its table with it. docs/configuration.md lists the same options
(tests/experiments/test_strategy_options.py compares the two).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, create_model, field_validator

from kernelswarm.search import Option, strategy_options


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def options_table(strategy: str, options: tuple[Option, ...]) -> type[BaseModel]:
    """``[search.<strategy>]``: the options ``strategy`` declares, each value checked by its
    ``Option.check``."""
    declared = {option.name: option for option in options}

    def check(cls: type[BaseModel], value: Any, info: ValidationInfo) -> Any:
        return declared[str(info.field_name)].check(value)

    fields: dict[str, Any] = {option.name: (Any, Field(option.default, description=option.help))
                              for option in options}
    return create_model(  # type: ignore[call-overload, no-any-return]
        f"{strategy.title().replace('_', '')}Options", __base__=_Table, __module__=__name__,
        __doc__=f"``[search.{strategy}]``: the options search/strategies/{strategy}.py declares.",
        __validators__={"_declared": field_validator(*declared)(check)}, **fields)


# One table per strategy that declares options, by strategy name; each is also a name of this
# module, where pickle (Ray shipping a configuration) looks its class up.
TABLES = {strategy: options_table(strategy, options)
          for strategy, options in strategy_options().items() if options}
globals().update({table.__name__: table for table in TABLES.values()})

# The [search] keys that are tables of strategy options.
StrategyOptions = create_model(  # type: ignore[call-overload]
    "StrategyOptions", __base__=_Table, __module__=__name__,
    **{strategy: (table, Field(default_factory=table)) for strategy, table in TABLES.items()})


def stored_form(data: dict[str, Any]) -> dict[str, Any]:
    """A run folder's ``config.json`` as the schema reads it: the islands strategy's
    ``island_size``, which the ``config.json`` of older run folders holds in ``[search]``
    itself, in ``[search.islands]``."""
    search = data.get("search")
    if isinstance(search, dict) and "island_size" in search:
        search = {**search}
        islands = {**search.get("islands", {}), "island_size": search.pop("island_size")}
        data = {**data, "search": {**search, "islands": islands}}
    return data
