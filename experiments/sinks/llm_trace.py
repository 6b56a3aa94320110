"""LLM calls for MLflow: each lineage's trace file, followed as it grows.

The LLM roles of lineage ``n`` append every call to ``<run folder>/llm_calls/lineage-<n>.jsonl``
(``kernelswarm.agents.llm.trace``: one ``LLMCall`` a line). ``TraceFollower`` reads the calls
added since its last read, so the MLflow sink can log them into the lineage's child run as the
run goes, and sum their ``Usage`` per role at the end.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kernelswarm.agents import (
    TRACE_FOLDER,
    LLMCall,
    TraceError,
    trace_file,
    trace_lineage,
)
from kernelswarm.search import Usage

__all__ = ["TRACE_FOLDER", "TraceError", "TraceFollower", "call_artifact", "call_metrics",
           "usage_by_role"]


@dataclass
class TraceFollower:
    """Reads complete lines appended to the trace files under ``folder`` since the last read."""

    folder: Path
    _offsets: dict[int, int] = field(default_factory=dict)
    _counts: dict[int, int] = field(default_factory=dict)

    def lineages(self) -> list[int]:
        if not self.folder.is_dir():
            return []
        found = (trace_lineage(p) for p in self.folder.iterdir())
        return sorted(n for n in found if n is not None)

    def new_calls(self, lineage: int) -> list[tuple[int, LLMCall]]:
        """``(index, call)`` for each call logged since the last read; index counts from 0.
        ``TraceError`` for a line that is not a call."""
        try:
            with open(trace_file(self.folder, lineage), "rb") as handle:
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
                calls.append((index, LLMCall.from_json(line)))
        return calls


def call_metrics(call: LLMCall) -> dict[str, float]:
    """Per call, as metrics stepped by the call's index in its lineage."""
    return {"llm_latency_s": call.latency_s,
            "llm_prompt_tokens": float(call.prompt_tokens),
            "llm_completion_tokens": float(call.completion_tokens),
            "llm_cost_usd": call.cost_usd,
            "llm_ok": float(call.answered)}


def call_artifact(index: int, call: LLMCall) -> tuple[str, str]:
    """The artifact path and text of one call: its prompt, answer and figures."""
    name = f"llm_calls/{index:05d}-{call.request or 'call'}-{call.outcome}.json"
    document = {**asdict(call), "messages": [dict(m) for m in call.messages]}
    return name, json.dumps(document, indent=2)


def usage_by_role(calls: Iterable[LLMCall]) -> dict[str, Usage]:
    """The calls' ``Usage`` summed per role."""
    totals: dict[str, Usage] = {}
    for call in calls:
        totals[call.role] = totals.get(call.role, Usage()) + call.usage()
    return totals
