"""Building a lineage's LLM roles: one ledger, four clients, the templates, the task."""

from __future__ import annotations

import functools
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kernelswarm.search import Roles, Task, load_task

from .client import ChatClient, openai_client
from .ledger import Ledger
from .roles import LLMAnalyst, LLMCoder, LLMPlanner, LLMTester
from .settings import LLMSettings
from .templates import load_templates
from .trace import trace_file


def llm_roles(settings: LLMSettings, task: Task, language: str, *, lineage: int = 0,
              ledger: Ledger | None = None, seed: int | None = None) -> Roles:
    """The four LLM roles of one lineage, sharing one ledger (and so one spending limit)."""
    ledger = ledger or Ledger(lineage, settings.limit)
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
                 analyst=LLMAnalyst(client("analyst"), **common),
                 tester=LLMTester(client("tester"), **common))


@functools.lru_cache(maxsize=4)
def _task(path: Path, device: str) -> Task:
    return load_task(path, device)


@dataclass(frozen=True)
class LLMRoleFactory:
    """``factory(seed) -> Roles`` for the lineage with that seed; picklable, so it can be
    shipped to the process that runs the lineage, where the clients (and API keys) are made.

    ``trace_dir``: each lineage appends every LLM call to ``trace_dir/lineage-<n>.jsonl``.
    ``lineage_of_seed``: which lineage each seed belongs to (seeds not in it: lineage = seed).
    """

    settings: LLMSettings
    task_path: Path
    language: str
    device: str = "cpu"
    trace_dir: Path | None = None
    lineage_of_seed: Mapping[int, int] = field(default_factory=dict)

    def trace_path(self, lineage: int) -> Path | None:
        return trace_file(self.trace_dir, lineage) if self.trace_dir else None

    def __call__(self, seed: int) -> Roles:
        lineage = self.lineage_of_seed.get(seed, seed)
        ledger = Ledger(lineage, self.settings.limit, self.trace_path(lineage))
        return llm_roles(self.settings, _task(Path(self.task_path), self.device), self.language,
                         lineage=lineage, ledger=ledger, seed=seed)
