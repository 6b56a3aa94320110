"""The [agent] section for the LLM agent: per-role models, prices, and errors that name the key
without ever echoing a key."""

from __future__ import annotations

import pytest

from kernelswarm.experiments.agent.roles import configured_roles, llm_settings
from kernelswarm.experiments.config import ConfigError, load_config
from tests.agents.llm.conftest import KEY_ENV

LLM = ["agent.kind=llm", f'agent.llm={{model="small", api_key_env="{KEY_ENV}"}}']


def test_roles_take_their_own_keys_then_the_shared_ones():
    config = load_config(None, [*LLM, 'agent.planner={model="large", timeout_s=300}',
                                'agent.prices={small={prompt=0.5, completion=1.5}, '
                                'large={prompt=5, completion=15}}', "search.cost_usd=2.0"])
    settings = llm_settings(config)
    planner, coder = settings.roles["planner"], settings.roles["coder"]
    assert (planner.model, planner.timeout_s, planner.api_key_env) == ("large", 300, KEY_ENV)
    assert (coder.model, coder.timeout_s, coder.max_retries) == ("small", 120, 4)
    assert settings.limit.cost_usd == 2.0 and settings.price("large").completion == 15


@pytest.mark.parametrize("overrides, message", [
    (["agent.kind=llm"], "agent.planner: no model: set agent.planner.model, or agent.llm.model"),
    (['agent.llm={model="m"}'], 'agent.llm: only used when agent.kind = "llm"'),
    ([*LLM, 'agent.coder={model="m", temperature=3}'], "agent.coder.temperature: Input should be"),
    ([*LLM, 'agent.coder={model="m", base_url="localhost:8000"}'], "agent.coder.base_url"),
    ([*LLM, 'agent.prices={small={prompt=1}}'], "agent.prices.small.completion: Field required"),
    ([*LLM, 'agent.tester={modle="m"}'], "agent.tester.modle: unknown key; allowed here: "
                                         "api_key_env, base_url"),
])
def test_a_bad_agent_section_names_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        load_config(None, overrides)


def test_a_key_pasted_where_its_variable_name_belongs_is_refused_and_not_echoed():
    pasted = "sk-proj-0123456789abcdef"
    for value in (pasted, "MY_VARIABLE"):
        with pytest.raises(ConfigError) as raised:
            load_config(None, ["agent.kind=llm", f'agent.llm={{model="m", api_key_env="{value}"}}'])
        assert "agent.llm.api_key_env" in str(raised.value) and value not in str(raised.value)


def test_the_driver_refuses_a_money_cap_without_prices_and_an_unset_key(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="agent.prices: search.cost_usd is set, so every model "
                                          "needs a price; none for small"):
        llm_settings(load_config(None, [*LLM, "search.cost_usd=1"]))
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(ConfigError, match=f"{KEY_ENV} is not set"):
        configured_roles(load_config(None, LLM), tmp_path, tmp_path, [0])


def test_set_reaches_nested_keys_at_any_depth_and_names_a_bad_one():
    config = load_config(None, [*LLM, "agent.llm.base_url=http://localhost:8000/v1",
                                "agent.coder.max_tokens=2048",
                                'agent.prices."gpt-4.1".prompt=2.0',
                                'agent.prices."gpt-4.1".completion=8'])
    settings = llm_settings(config)
    assert settings.roles["planner"].base_url == "http://localhost:8000/v1"
    assert settings.roles["coder"].max_tokens == 2048 and settings.roles["planner"].model == "small"
    assert settings.price("gpt-4.1").completion == 8.0
    with pytest.raises(ConfigError, match="search.lineages is a value, not a table"):
        load_config(None, ["search.lineages.x=1"])
    with pytest.raises(ConfigError, match="'agent..x' is not a key"):
        load_config(None, ["agent..x=1"])
    with pytest.raises(ConfigError, match=r"agent\.llm\.base_urll: unknown key"):
        load_config(None, [*LLM, "agent.llm.base_urll=http://x"])


def test_the_logged_parameters_hold_each_role_as_sent():
    params = load_config(None, [*LLM, "agent.planner.temperature=0.7"]).flat()
    assert params["agent.llm"]["temperature"] == 0.2 and params["agent.llm"]["max_tokens"] == 4096
    assert params["agent.planner"]["temperature"] == 0.7
    assert params["agent.coder"]["max_tokens"] == 4096 and params["agent.coder"]["model"] == "small"
