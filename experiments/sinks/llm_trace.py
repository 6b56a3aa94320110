"""LLM calls for MLflow: each lineage's trace file, followed as it grows.

The LLM roles of lineage ``n`` append every call to ``<run folder>/llm_calls/lineage-<n>.jsonl``
(one JSON object a line: role, request, model, attempt, outcome, messages, answer, tokens, cost,
latency, error). ``TraceFollower`` reads the lines added since its last read, so the MLflow sink
can log them into the lineage's child run as the run goes, and sum them per role at the end.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TRACE_FOLDER = "llm_calls"
_FILE = re.compile(r"lineage-(-?\d+)\.jsonl")


@dataclass
class TraceFollower:
    """Reads complete lines appended to the trace files under ``folder`` since the last read."""

    folder: Path
    _offsets: dict[int, int] = field(default_factory=dict)
    _counts: dict[int, int] = field(default_factory=dict)

    def lineages(self) -> list[int]:
        if not self.folder.is_dir():
            return []
        found = (_FILE.fullmatch(p.name) for p in self.folder.iterdir())
        return sorted(int(m.group(1)) for m in found if m)

    def new_calls(self, lineage: int) -> list[tuple[int, dict[str, Any]]]:
        """``(index, call)`` for each call logged since the last read; index counts from 0."""
        path = self.folder / f"lineage-{lineage}.jsonl"
        try:
            with open(path, "rb") as handle:
                handle.seek(self._offsets.get(lineage, 0))
                data = handle.read()
        except FileNotFoundError:
            return []
        complete = data[:data.rfind(b"\n") + 1]  # a line being written is read next time
        self._offsets[lineage] = self._offsets.get(lineage, 0) + len(complete)
        calls = []
        for line in complete.decode("utf-8", errors="replace").splitlines():
            if line.strip():
                index = self._counts.get(lineage, 0)
                self._counts[lineage] = index + 1
                calls.append((index, json.loads(line)))
        return calls


def call_metrics(call: Mapping[str, Any]) -> dict[str, float]:
    """Per call, as metrics stepped by the call's index in its lineage."""
    return {"llm_latency_s": float(call.get("latency_s", 0.0)),
            "llm_prompt_tokens": float(call.get("prompt_tokens", 0)),
            "llm_completion_tokens": float(call.get("completion_tokens", 0)),
            "llm_cost_usd": float(call.get("cost_usd", 0.0)),
            "llm_ok": float(call.get("outcome") == "ok")}


def call_artifact(index: int, call: Mapping[str, Any]) -> tuple[str, str]:
    """The artifact path and text of one call: its prompt, answer and figures."""
    name = f"llm_calls/{index:05d}-{call.get('request', 'call')}-{call.get('outcome', '')}.json"
    return name, json.dumps(call, indent=2)


@dataclass
class RoleTotals:
    calls: int = 0  # answers received
    attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    malformed: int = 0
    failures: int = 0
    latency_s: float = 0.0

    def add(self, call: Mapping[str, Any]) -> None:
        self.attempts += 1
        self.calls += call.get("outcome") in ("ok", "malformed")
        self.malformed += call.get("outcome") == "malformed"
        self.failures += bool(call.get("gave_up"))
        self.prompt_tokens += int(call.get("prompt_tokens", 0))
        self.completion_tokens += int(call.get("completion_tokens", 0))
        self.cost_usd += float(call.get("cost_usd", 0.0))
        self.latency_s += float(call.get("latency_s", 0.0))

    def metrics(self, prefix: str) -> dict[str, float]:
        return {f"{prefix}.{k}": float(v) for k, v in vars(self).items()}


def totals_by_role(calls: Iterable[Mapping[str, Any]]) -> dict[str, RoleTotals]:
    totals: dict[str, RoleTotals] = {}
    for call in calls:
        totals.setdefault(str(call.get("role", "")), RoleTotals()).add(call)
    return totals
