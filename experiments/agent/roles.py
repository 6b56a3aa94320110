"""The configured agent: ``[agent]`` turned into a roles factory, and the run's start-up request.

The driver checks here, before Ray starts, what would otherwise fail inside every lineage: an
API key variable that is not set, a money budget without prices, an endpoint that cannot serve
(``check_agent``: unreachable, not OpenAI's protocol, the key refused, the model not served).
Whatever the agent, its roles are never told the task's held-out shapes (``Roles.withheld``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from kernelswarm.agents import (
    ROLE_NAMES,
    EndpointProblem,
    LLMRoleFactory,
    LLMSettings,
    MissingAPIKey,
    Price,
    RoleModel,
    SpendLimit,
    builtin_roles,
    check_endpoints,
    read_api_key,
)
from kernelswarm.search import Check, Roles, Task, Usage, Withheld, load_task

from ..config import Config, ConfigError
from ..sinks.llm_trace import TRACE_FOLDER


def llm_settings(config: Config) -> LLMSettings:
    """The LLM agent's settings; the lineage budget in tokens and money is also a hard limit on
    the calls themselves, and so is ``search.wall_time_s``: each lineage's calls end within it
    from the search's start (``Roles.until``), the start-up's within a share of it."""
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
        backoff_s=agent.backoff_s, backoff_max_s=max(agent.backoff_s, agent.backoff_max_s),
        wall_s=config.search.wall_time_s)


def check_agent(config: Config) -> None:
    """Refuse, with a ``ConfigError`` naming the setting, an LLM agent that could not make a
    single call: a key variable not set, a money cap without prices, or an endpoint that cannot
    serve its roles (each server asked once, in a few seconds). Called before the run folder
    and Ray exist; the built-in agent needs nothing."""
    if config.agent.kind != "llm":
        return
    settings = llm_settings(config)
    try:
        problems = check_endpoints(settings.roles)
    except MissingAPIKey as exc:
        raise ConfigError(str(exc)) from None
    if problems:
        raise ConfigError("; ".join(_setting_at_fault(config, p) for p in problems))


def _setting_at_fault(config: Config, problem: EndpointProblem) -> str:
    """"agent.llm.base_url: cannot reach ... (every role)": the key a user edits to fix it, the
    role's own where it sets one, else the shared ``[agent.llm]``."""
    setting = problem.fault.setting
    keys = dict.fromkeys(
        f"agent.{role}.{setting}" if getattr(getattr(config.agent, role), setting) is not None
        else f"agent.llm.{setting}" for role in problem.roles)
    who = "every role" if len(problem.roles) == len(ROLE_NAMES) else ", ".join(problem.roles)
    return f"{' / '.join(keys)}: {problem.detail} (for {who}; checked before the run started)"


def _builtin_roles(withheld: Withheld, seed: int) -> Roles:
    return replace(builtin_roles(seed), withheld=withheld)


def configured_roles(config: Config, task_path: Path, run_dir: Path,
                     seeds: list[int]) -> Callable[[int], Roles]:
    """``make_roles(seed)`` for the configured agent."""
    if config.agent.kind == "builtin":
        return partial(_builtin_roles, Withheld.of(load_task(task_path, config.evaluator.device)))
    settings = llm_settings(config)
    for name, model in settings.roles.items():
        try:
            read_api_key(name, model)
        except MissingAPIKey as exc:
            raise ConfigError(str(exc)) from None
    return LLMRoleFactory(settings, Path(task_path), config.task.language,
                          config.evaluator.device, run_dir / TRACE_FOLDER,
                          {seed: lineage for lineage, seed in enumerate(seeds)})


@dataclass(frozen=True)
class StartUp:
    """The tester's answer, asked once for the run before the lineages start."""

    checks: tuple[Check, ...]
    make_roles: Callable[[int], Roles]  # the factory, carrying what the request spent
    failure: str = ""  # why the tester proposed nothing, where its request failed
    usage: Usage = Usage()


def ask_tester(config: Config, task: Task, make_roles: Callable[[int], Roles],
               seed: int) -> StartUp:
    """The tester's extra checks. With the LLM agent the request has a ledger of its own (traced
    as the starting kernel's lineage, held to one lineage's limit and the run's deadline), and
    what it spent is carried into lineage 0's limit, so that the run as a whole spends at most
    ``search.lineages`` times the lineage limit."""
    if not config.search.tester:
        return StartUp((), make_roles)
    llm = isinstance(make_roles, LLMRoleFactory)
    tester = (make_roles.start_up(seed) if llm else make_roles(seed)).tester
    if tester is None:
        return StartUp((), make_roles)
    checks = tester.checks(task, config.task.language)
    usage = tester.usage()
    if llm and (usage.tokens or usage.cost_usd):
        carried = {**make_roles.carried, 0: (usage.tokens, usage.cost_usd)}
        make_roles = replace(make_roles, carried=carried)
    return StartUp(checks, make_roles, getattr(tester, "error", ""), usage)
