"""A search strategy's own options, declared by the strategy (``Strategy.options``): the
configuration's ``[search.<strategy>]`` tables take them from there, refuse what they do not
allow naming the key, hand them to the strategy, and docs/configuration.md lists them as
declared."""

from __future__ import annotations

import json
import re

import pytest

from kernelswarm.experiments.commands.cli import main
from kernelswarm.experiments.config import ConfigError, load_config, load_run_config
from kernelswarm.experiments.run.prepare import population_of
from kernelswarm.search import Archive, make_strategy
from kernelswarm.search.strategies import strategy_options
from tests.conftest import ROOT

DECLARED = {name: options for name, options in strategy_options().items() if options}


def _documented_tables() -> dict[str, list[list[str]]]:
    """Each ``[search.<strategy>]`` table of docs/configuration.md: its rows, as cells."""
    text = (ROOT / "docs" / "configuration.md").read_text()
    tables = {}
    for m in re.finditer(r"^`\[search\.(\w+)\]`\n\n((?:\|.*\n)+)", text, re.MULTILINE):
        rows = [[cell.strip() for cell in line.strip().strip("|").split(" | ")]
                for line in m.group(2).splitlines()[2:]]
        tables[m.group(1)] = rows
    return tables


def _toml(value: object) -> str:
    return json.dumps(list(value) if isinstance(value, tuple) else value)


def test_the_configuration_page_lists_each_strategys_options_as_declared():
    documented = _documented_tables()
    assert set(documented) == set(DECLARED), "a [search.<strategy>] table per strategy"
    for strategy, options in DECLARED.items():
        assert documented[strategy] == [
            [f"`{o.name}`", f"`{_toml(o.default)}`", o.allowed(), o.help] for o in options], (
            f"docs/configuration.md, [search.{strategy}]: not as search/strategies/"
            f"{strategy}.py declares its options")


@pytest.mark.parametrize("strategy", sorted(DECLARED))
def test_each_declared_option_reaches_its_strategy_through_the_configuration(strategy):
    config = load_config(None, [f'search.strategy="{strategy}"'])
    population = population_of(config)
    built = make_strategy(population, Archive())
    for option in DECLARED[strategy]:
        assert population.options[option.name] == option.default
        assert built.option(option.name) == option.default


def test_a_value_given_in_the_table_is_the_strategys():
    islands = load_config(None, ["search.islands.island_size=3"])
    assert make_strategy(population_of(islands), Archive()).option("island_size") == 3
    cells = load_config(None, ['search.strategy="map_elites"',
                               'search.map_elites.descriptors=["shape", "move"]'])
    assert make_strategy(population_of(cells), Archive()).descriptors == ("shape", "move")


@pytest.mark.parametrize("override, message", [
    ('search.islands.island_size="8"', "search.islands.island_size: must be an integer >= 1 "
                                       "(got '8')"),
    ("search.islands.island_size=0", "search.islands.island_size: must be an integer >= 1"),
    ('search.map_elites.descriptors=["colour"]', "search.map_elites.descriptors: must be a list "
                                                 "of some of language, structure, shape, move"),
    ('search.map_elites.descriptors=["shape", "shape"]', "search.map_elites.descriptors: names "
                                                         "shape more than once"),
    ("search.map_elites.cells=4", "search.map_elites.cells: unknown key; allowed here: "
                                  "descriptors"),
    ("search.island_size=4", "search.island_size: unknown key"),
])
def test_an_unknown_or_badly_typed_option_is_refused_naming_the_key(override, message, capsys):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, [override])
    assert main(["run", "--set", override]) == 2
    assert message in " ".join(capsys.readouterr().out.split())


def test_a_run_folder_holding_island_size_in_search_reads_it_as_the_islands_option(tmp_path):
    stored = load_config(None, ["search.islands.island_size=5"]).model_dump(mode="json")
    stored["search"]["island_size"] = stored["search"].pop("islands")["island_size"]
    (tmp_path / "config.json").write_text(json.dumps(stored))
    assert load_run_config(tmp_path).search.islands.island_size == 5
