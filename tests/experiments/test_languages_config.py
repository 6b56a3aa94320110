"""``search.languages`` in a configuration and a sweep: what it means, and the mistakes refused
with the key named before anything starts."""

from __future__ import annotations

import pytest

from kernelswarm.experiments.config import ConfigError, load_config, load_run_config
from kernelswarm.experiments.sweep.sweep_file import load_sweep


def test_lineages_take_the_languages_in_turn_the_first_is_the_reference():
    config = load_config(None, ['search.languages=["triton", "cpp"]', "search.lineages=5"])
    assert config.languages == ("triton", "cpp")
    assert [config.lineage_language(i) for i in range(5)] == ["triton", "cpp"] * 2 + ["triton"]
    # task.language left out: the first of them; a configuration setting it to one listed, or
    # setting no search.languages, runs as it did
    assert config.task.language == "triton"
    assert load_config(None, ['search.languages=["triton", "cpp"]', "search.lineages=2",
                              'task.language="cpp"']).task.language == "cpp"
    plain = load_config(None, ['task.language="triton"'])
    assert plain.languages == ("triton",) and plain.search.languages is None


def test_a_saved_configuration_reads_back_the_same(tmp_path):
    import json

    config = load_config(None, ['search.languages=["cuda", "triton"]', "search.lineages=2"])
    (tmp_path / "config.json").write_text(json.dumps(config.model_dump(mode="json")))
    assert load_run_config(tmp_path) == config


@pytest.mark.parametrize(("overrides", "message"), [
    (['search.languages=["cpp", "fortran"]'], r"search\.languages: Input should be 'cpp'"),
    (['search.languages=["cpp", "cpp"]'], r"search\.languages: lists cpp more than once"),
    (['search.languages=[]'], r"search\.languages: List should have at least 1 item"),
    (['search.languages=["cpp", "triton"]', "search.lineages=1"],
     r"search\.languages: 2 languages need at least 2 lineages"),
    (['search.languages=["cuda", "triton"]', 'task.language="cpp"'],
     r"task\.language = 'cpp' is not one of search\.languages \(cuda, triton\)"),
])
def test_invalid_languages_are_refused_naming_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_a_sweep_takes_languages_as_an_axis_or_a_base_setting(tmp_path):
    sweep = tmp_path / "sweep.toml"
    sweep.write_text("""
[sweep]
name = "langs"

[base]
search.lineages = 2
search.languages = ["cpp", "triton"]

[grid]
"search.languages" = [["cpp", "triton"], ["triton"]]
seeds = [0, 1]
""")
    spec = load_sweep(sweep)
    assert sorted({c.config.languages for c in spec.cells}) == [("cpp", "triton"), ("triton",)]
    assert len(spec.cells) == 4
    assert all(c.config.task.language in c.config.languages for c in spec.cells)
    assert len({c.folder for c in spec.cells}) == 4  # each cell its own run folder
    base_only = tmp_path / "base.toml"
    base_only.write_text(sweep.read_text().replace('"search.languages" = [["cpp", "triton"], '
                                                   '["triton"]]\n', ""))
    assert {c.config.languages for c in load_sweep(base_only).cells} == {("cpp", "triton")}
    bad = tmp_path / "bad.toml"
    bad.write_text(sweep.read_text().replace('["triton"]]', '["cpp", "cuda", "triton"]]'))
    with pytest.raises(ConfigError, match=r"search\.languages: 3 languages need at least 3"):
        load_sweep(bad)
    gemm = tmp_path / "gemm.toml"  # gemm has no triton kernel: refused before any cell runs
    gemm.write_text(sweep.read_text().replace("seeds = [0, 1]", 'tasks = ["gemm"]'))
    with pytest.raises(ConfigError, match=r"cell .*search\.languages: task 'gemm' has no "
                                          r"starting kernel in 'triton'"):
        load_sweep(gemm)


def test_an_llm_agents_lineages_are_told_their_own_language():
    from pathlib import Path

    from kernelswarm.agents.llm import LLMRoleFactory
    from kernelswarm.experiments.run.prepare import roles_for

    factory = LLMRoleFactory(settings=None, task_path=Path("task"), language="cuda",
                             lineage_of_seed={0: 0, 1: 1})
    triton = roles_for(factory, "triton")
    assert triton.language == "triton" and triton.lineage_of_seed == factory.lineage_of_seed
    assert roles_for(factory, "cuda") is factory

    def builtin(seed):  # the built-in roles read each candidate's language
        return seed

    assert roles_for(builtin, "triton") is builtin
