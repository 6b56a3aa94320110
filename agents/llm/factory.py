"""Building a lineage's LLM roles: one ledger, four clients, the templates, the task, and
what they must never be told (the task's held-out shapes)."""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kernelswarm.search import Roles, Task, Withheld, load_task

from .client import ChatClient, openai_client
from .ledger import Ledger
from .roles import LLMAnalyst, LLMCoder, LLMPlanner, LLMTester
from .settings import LLMSettings
from .templates import load_templates
from .trace import START_LINEAGE, trace_file


def llm_roles(settings: LLMSettings, task: Task, language: str, *, lineage: int = 0,
              ledger: Ledger | None = None, seed: int | None = None,
              shared_dir: Path | None = None) -> Roles:
    """The four LLM roles of one lineage, sharing one ledger (and so one spending limit and one
    deadline). They are never told the task's held-out shapes (``Roles.withheld``).

    ``shared_dir``: a folder the lineages of a run share; the starting kernel's analysis is
    asked once per run there and read by every other lineage.
    """
    ledger = ledger or Ledger(lineage, settings.limit, deadline=settings.deadline)
    templates = load_templates(settings.prompt_dir)
    rng = random.Random(seed)
    endpoints: dict[tuple[object, ...], object] = {}

    def client(role: str) -> ChatClient:
        model = settings.roles[role]
        key = (model.base_url, model.api_key_env, model.timeout_s)
        if key not in endpoints:
            endpoints[key] = openai_client(role, model)
        return ChatClient(role, settings, ledger, rng=random.Random(rng.random()),
                          endpoint=endpoints[key])

    common = dict(templates=templates, task=task, language=language)
    return Roles(planner=LLMPlanner(client("planner"), **common),
                 coder=LLMCoder(client("coder"), **common),
                 analyst=LLMAnalyst(client("analyst"), **common, shared_dir=shared_dir),
                 tester=LLMTester(client("tester"), **common),
                 withheld=Withheld.of(task))


# The start-up requests (the tester's) may take this share of the search's wall-time budget: a
# model that hangs at start-up must not hold the run's start for longer.
START_UP_SHARE = 1 / 3
START_UP_DEADLINE = ("the start-up's time for model calls (a third of search.wall_time_s, "
                     "before the search's own budget starts)")


@functools.lru_cache(maxsize=4)
def _task(path: Path, device: str) -> Task:
    return load_task(path, device)


@dataclass(frozen=True)
class LLMRoleFactory:
    """``factory(seed) -> Roles`` for the lineage with that seed; picklable, so it can be
    shipped to the process that runs the lineage, where the clients (and API keys) are made.

    ``trace_dir``: each lineage appends every LLM call to ``trace_dir/lineage-<n>.jsonl`` (and
    shares the starting kernel's analysis there). ``lineage_of_seed``: which lineage each seed
    belongs to (seeds not in it: lineage = seed). ``carried``: tokens and dollars spent for a
    lineage before it started (the run's start-up requests), counted against its limit.
    """

    settings: LLMSettings
    task_path: Path
    language: str
    device: str = "cpu"
    trace_dir: Path | None = None
    lineage_of_seed: Mapping[int, int] = field(default_factory=dict)
    carried: Mapping[int, tuple[int, float]] = field(default_factory=dict)

    def trace_path(self, lineage: int) -> Path | None:
        return trace_file(self.trace_dir, lineage) if self.trace_dir else None

    def _roles(self, lineage: int, seed: int, deadline: float | None = None,
               deadline_name: str = "") -> Roles:
        ledger = Ledger(lineage, self.settings.limit, self.trace_path(lineage),
                        deadline=self.settings.deadline if deadline is None else deadline,
                        carried=tuple(self.carried.get(lineage, (0, 0.0))))  # type: ignore[arg-type]
        if deadline_name:
            ledger.deadline_name = deadline_name
        return llm_roles(self.settings, _task(Path(self.task_path), self.device), self.language,
                         lineage=lineage, ledger=ledger, seed=seed, shared_dir=self.trace_dir)

    def __call__(self, seed: int) -> Roles:
        return self._roles(self.lineage_of_seed.get(seed, seed), seed)

    def start_up(self, seed: int) -> Roles:
        """Roles for the requests made once for the whole run before the lineages start (the
        tester's): their own ledger, with one lineage's limit, traced as the starting kernel's
        lineage (``START_LINEAGE``). They end within ``START_UP_SHARE`` of the search's
        wall-time budget from now (the search's own budget starts after the start-up), or by
        the settings' deadline where that comes first."""
        deadline = self.settings.deadline
        if self.settings.wall_s is not None:
            share = time.time() + START_UP_SHARE * self.settings.wall_s
            deadline = share if deadline is None else min(deadline, share)
        return self._roles(START_LINEAGE, seed, deadline, START_UP_DEADLINE)
