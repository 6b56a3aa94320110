"""The configured LLM agent: ``[agent]`` with ``kind = "llm"`` turned into a roles factory.

The driver checks here, before Ray starts, what would otherwise fail inside every lineage: an
API key variable that is not set, a money budget without prices.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kernelswarm.agents import builtin_roles
from kernelswarm.agents.llm import (
    ROLE_NAMES,
    LLMRoleFactory,
    LLMSettings,
    MissingAPIKey,
    Price,
    RoleModel,
    SpendLimit,
)
from kernelswarm.agents.llm.client import read_api_key
from kernelswarm.search import Roles

from .config import Config, ConfigError
from .sinks.llm_trace import TRACE_FOLDER


def llm_settings(config: Config) -> LLMSettings:
    """The LLM agent's settings; the lineage budget in tokens and money is also a hard limit on
    the calls themselves."""
    agent = config.agent
    roles = {name: RoleModel(**agent.role(name)) for name in ROLE_NAMES}
    prices = {model: Price(p.prompt, p.completion) for model, p in agent.prices.items()}
    if config.search.cost_usd is not None:
        unpriced = sorted({r.model for r in roles.values()} - set(prices))
        if unpriced:
            raise ConfigError(f"agent.prices: search.cost_usd is set, so every model needs a "
                              f"price; none for {', '.join(unpriced)}")
    return LLMSettings(
        roles=roles, prices=prices, limit=SpendLimit(config.search.tokens, config.search.cost_usd),
        max_format_retries=agent.max_format_retries,
        prompt_dir=agent.prompt_dir.expanduser().resolve() if agent.prompt_dir else None,
        backoff_s=agent.backoff_s, backoff_max_s=max(agent.backoff_s, agent.backoff_max_s))


def configured_roles(config: Config, task_path: Path, run_dir: Path,
                     seeds: list[int]) -> Callable[[int], Roles]:
    """``make_roles(seed)`` for the configured agent."""
    if config.agent.kind == "builtin":
        return builtin_roles
    settings = llm_settings(config)
    for name, model in settings.roles.items():
        try:
            read_api_key(name, model)
        except MissingAPIKey as exc:
            raise ConfigError(str(exc)) from None
    return LLMRoleFactory(settings, Path(task_path), config.task.language,
                          config.evaluator.device, run_dir / TRACE_FOLDER,
                          {seed: lineage for lineage, seed in enumerate(seeds)})
