"""What a lineage's LLM roles spent, per role, and the trace of every call they made.

One ``Ledger`` per lineage, shared by its four roles, so that a spending limit holds for the
lineage as a whole. Every call attempt is an ``LLMCall``: kept until ``drain`` takes it and, where
a trace file is given, appended to it as one JSON line the moment it ends (so a crash loses
nothing). Thread-safe.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from kernelswarm.search import Usage

from .settings import SpendLimit
from .trace import LLMCall

MAX_PENDING = 1000  # calls kept for ``drain``; older ones stay only in the trace file


@dataclass
class Ledger:
    """Spending of one lineage's roles: usage per role, a spending limit, the call trace.

    Each recorded call adds ``LLMCall.usage()`` to its role's ``Usage``.
    """

    lineage: int = 0
    limit: SpendLimit = field(default_factory=SpendLimit)
    trace_path: Path | None = None

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._usage: dict[str, Usage] = {}
        self._pending: deque[LLMCall] = deque(maxlen=MAX_PENDING)
        self._mark = (0, 0.0)  # tokens and cost at the last candidate made
        if self.trace_path is not None:
            self.trace_path.parent.mkdir(parents=True, exist_ok=True)

    def record(self, call: LLMCall) -> None:
        """Account for one attempt and add it to the trace."""
        with self._lock:
            self._usage[call.role] = self._usage.get(call.role, Usage()) + call.usage()
            self._pending.append(call)
            if self.trace_path is not None:
                with open(self.trace_path, "a", encoding="utf-8") as handle:
                    handle.write(call.as_json() + "\n")

    def usage(self, role: str | None = None) -> Usage:
        """One role's usage, or (``role`` None) the lineage's total."""
        with self._lock:
            if role is not None:
                return self._usage.get(role, Usage())
            total = Usage()
            for usage in self._usage.values():
                total = total + usage
            return total

    def stop_reason(self) -> str | None:
        """Why no further call may start (the spending limit), or None."""
        total = self.usage()
        return self.limit.exceeded(total.tokens, total.cost_usd)

    def since_last_candidate(self) -> tuple[int, float]:
        """Tokens and cost spent since the previous call of this method: what a new candidate
        cost to propose (planning, analysis, coding, repairs and re-asks since the last one)."""
        total = self.usage()
        with self._lock:
            tokens, cost = total.tokens - self._mark[0], total.cost_usd - self._mark[1]
            self._mark = (total.tokens, total.cost_usd)
        return tokens, cost

    def drain(self) -> tuple[LLMCall, ...]:
        """The calls recorded since the last drain (at most ``MAX_PENDING``), oldest first."""
        with self._lock:
            calls = tuple(self._pending)
            self._pending.clear()
        return calls
