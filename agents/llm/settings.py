"""Settings of the LLM agent: which model each role calls, where, what it costs, what it may spend.

Plain frozen dataclasses, picklable, so that a factory holding them can be shipped to the
process that runs a lineage. The configuration schema (``kernelswarm.experiments.config``) builds
them from TOML; tests and the benchmark build them directly.

API keys are never held here: ``api_key_env`` is the *name* of an environment variable, read
when a client is created, in the process that makes the calls.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

ROLE_NAMES = ("planner", "coder", "tester", "analyst")


@dataclass(frozen=True)
class RoleModel:
    """One role's model endpoint and call limits."""

    model: str
    base_url: str | None = None  # None: OpenAI's endpoint; else e.g. http://localhost:8000/v1
    api_key_env: str = "OPENAI_API_KEY"  # "" when the server needs no key
    temperature: float = 0.2
    max_tokens: int = 4096  # completion tokens per answer
    timeout_s: float = 120.0  # no answer within this long: the call is a timeout
    max_retries: int = 4  # retries after a rate limit, a server error, a timeout

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("RoleModel.model: a model name is required")
        if self.timeout_s <= 0 or self.max_tokens < 1 or self.max_retries < 0:
            raise ValueError(f"RoleModel: timeout_s must be > 0, max_tokens >= 1 and "
                             f"max_retries >= 0; got {self}")


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens."""

    prompt: float
    completion: float

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.prompt + completion_tokens * self.completion) / 1e6


@dataclass(frozen=True)
class SpendLimit:
    """A hard limit on what one lineage's roles may spend together; None: no limit.

    A call starts only if what was spent, plus the worst case of every call in flight, plus its
    own worst case (its prompt at one token per byte and ``max_tokens`` of answer, at its
    model's price) stays within the limit; so the limit holds as long as servers honour
    ``max_tokens`` (the client refuses answers that do not, see ``ChatClient``).
    """

    tokens: int | None = None
    cost_usd: float | None = None

    def exceeded(self, tokens: int, cost_usd: float) -> str | None:
        """Why no further call may start once ``tokens`` and ``cost_usd`` are spent, or None."""
        if self.tokens is not None and tokens >= self.tokens:
            return f"LLM token budget reached: {tokens:,} tokens spent (limit {self.tokens:,})"
        if self.cost_usd is not None and cost_usd >= self.cost_usd:
            return f"LLM money budget reached: ${cost_usd:.4f} spent (limit ${self.cost_usd:g})"
        return None

    def refuses(self, tokens: int, cost_usd: float, worst_tokens: int, worst_cost_usd: float,
                what: str) -> str | None:
        """Why ``what``, a call that may take up to ``worst_tokens`` and ``worst_cost_usd``, must
        not start with ``tokens`` and ``cost_usd`` spent or reserved already; or None."""
        reason = self.exceeded(tokens, cost_usd)
        if reason is not None:
            return reason
        if self.tokens is not None and tokens + worst_tokens > self.tokens:
            return (f"LLM token budget reached: {tokens:,} tokens spent, and {what} may take up "
                    f"to {worst_tokens:,} more (limit {self.tokens:,})")
        if self.cost_usd is not None and cost_usd + worst_cost_usd > self.cost_usd:
            return (f"LLM money budget reached: ${cost_usd:.4f} spent, and {what} may cost up "
                    f"to ${worst_cost_usd:.4f} more (limit ${self.cost_usd:g})")
        return None


@dataclass(frozen=True)
class LLMSettings:
    """Everything the LLM roles of a lineage need besides the task."""

    roles: Mapping[str, RoleModel]  # one per name in ROLE_NAMES
    prices: Mapping[str, Price] = field(default_factory=dict)  # by model name
    limit: SpendLimit = SpendLimit()
    max_format_retries: int = 2  # re-asks after a malformed answer, per request
    prompt_dir: Path | None = None  # templates overriding the built-in ones, by file name
    history: int = 8  # attempts of the lineage shown in prompts
    migrants: int = 2  # elites of other lineages shown in prompts
    backoff_s: float = 1.0  # first wait before a retry; doubles each retry, with jitter
    backoff_max_s: float = 30.0
    # Unix time by which every call ends; a run's lineages get theirs when the search starts
    # (``Roles.until``: search.wall_time_s from then), and leave this None
    deadline: float | None = None
    # search.wall_time_s, the search's budget: the run's start-up requests (the tester's) may
    # take a share of it (agents/llm/factory.py, START_UP_SHARE)
    wall_s: float | None = None

    def __post_init__(self) -> None:
        missing = [name for name in ROLE_NAMES if name not in self.roles]
        if missing:
            raise ValueError(f"LLMSettings.roles lacks {', '.join(missing)}")
        object.__setattr__(self, "roles", MappingProxyType(dict(self.roles)))
        object.__setattr__(self, "prices", MappingProxyType(dict(self.prices)))
        if self.limit.cost_usd is not None:
            unpriced = sorted({r.model for r in self.roles.values()} - set(self.prices))
            if unpriced:
                raise ValueError(f"a money limit needs a price for every model; none for "
                                 f"{', '.join(unpriced)}")
        if self.max_format_retries < 0:
            raise ValueError("LLMSettings: max_format_retries must be >= 0")
        if not (math.isfinite(self.backoff_s) and 0 <= self.backoff_s <= self.backoff_max_s):
            raise ValueError("LLMSettings: need 0 <= backoff_s <= backoff_max_s")

    def price(self, model: str) -> Price:
        """The model's price; a model missing from the table costs nothing (a local server)."""
        return self.prices.get(model, Price(0.0, 0.0))
