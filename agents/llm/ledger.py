"""What a lineage's LLM roles spent, per role, and the trace of every call they made.

One ``Ledger`` per lineage, shared by its four roles, so that a spending limit holds for the
lineage as a whole. Every call attempt is an ``LLMCall``: kept until ``drain`` takes it and, where
a trace file is given, appended to it as one JSON line the moment it ends (so a crash loses
nothing). Thread-safe.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kernelswarm.search import Usage

from .settings import SpendLimit

# Outcomes of one call attempt.
OK = "ok"  # an answer that parsed
MALFORMED = "malformed"  # an answer that did not parse; asked again with the reason
RATE_LIMITED = "rate_limited"  # HTTP 429
SERVER_ERROR = "server_error"  # HTTP 5xx
TIMEOUT = "timeout"  # no answer within the role's timeout_s
CONNECTION_ERROR = "connection_error"
REFUSED = "refused"  # any other HTTP error (bad key, unknown model): not retried
RETRYABLE = (RATE_LIMITED, SERVER_ERROR, TIMEOUT, CONNECTION_ERROR)
MAX_PENDING = 1000  # calls kept for ``drain``; older ones stay only in the trace file


@dataclass(frozen=True)
class LLMCall:
    """One attempt at one request: what was sent, what came back, what it cost and took."""

    lineage: int
    role: str  # planner | coder | tester | analyst
    request: str  # planner | coder | repair | tester | analyst
    model: str
    attempt: int  # 1 for the first try of a request; retries and re-asks count up
    outcome: str  # one of the outcomes above
    messages: tuple[Mapping[str, str], ...]  # the prompt as sent
    answer: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    error: str = ""  # why the attempt failed, or why its answer was refused
    started: float = 0.0  # Unix time
    estimated_tokens: bool = False  # the server sent no usage: tokens estimated from text length
    gave_up: bool = False  # the last attempt of a request that produced no usable answer

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_json(self) -> str:
        return json.dumps({**asdict(self), "messages": [dict(m) for m in self.messages]})


@dataclass
class _Tally:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    malformed: int = 0
    failures: int = 0

    def frozen(self) -> Usage:
        return Usage(self.calls, self.prompt_tokens, self.completion_tokens, self.cost_usd,
                     self.malformed, self.failures)


@dataclass
class Ledger:
    """Spending of one lineage's roles: usage per role, a spending limit, the call trace.

    ``Usage.calls`` counts answers received (whether they parsed or not); ``failures`` counts
    requests given up after their retries.
    """

    lineage: int = 0
    limit: SpendLimit = field(default_factory=SpendLimit)
    trace_path: Path | None = None

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._tallies: dict[str, _Tally] = {}
        self._pending: deque[LLMCall] = deque(maxlen=MAX_PENDING)
        self._mark = (0, 0.0)  # tokens and cost at the last candidate made
        if self.trace_path is not None:
            self.trace_path.parent.mkdir(parents=True, exist_ok=True)

    def _tally(self, role: str) -> _Tally:
        return self._tallies.setdefault(role, _Tally())

    def record(self, call: LLMCall) -> None:
        """Account for one attempt and add it to the trace."""
        with self._lock:
            tally = self._tally(call.role)
            if call.outcome in (OK, MALFORMED):
                tally.calls += 1
            tally.malformed += call.outcome == MALFORMED
            tally.prompt_tokens += call.prompt_tokens
            tally.completion_tokens += call.completion_tokens
            tally.cost_usd += call.cost_usd
            self._pending.append(call)
            if self.trace_path is not None:
                with open(self.trace_path, "a", encoding="utf-8") as handle:
                    handle.write(call.as_json() + "\n")

    def failed(self, role: str) -> None:
        """A request of ``role`` was given up."""
        with self._lock:
            self._tally(role).failures += 1

    def usage(self, role: str | None = None) -> Usage:
        """One role's usage, or (``role`` None) the lineage's total."""
        with self._lock:
            if role is not None:
                return self._tally(role).frozen()
            total = Usage()
            for tally in self._tallies.values():
                total = total + tally.frozen()
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
