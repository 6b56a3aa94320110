"""What a lineage's LLM roles spent, per role, and the trace of every call they made.

One ``Ledger`` per lineage, shared by its four roles, so that a spending limit holds for the
lineage as a whole. Every call attempt is an ``LLMCall``: kept until ``drain`` takes it and, where
a trace file is given, appended to it as one JSON line the moment it ends (so a crash loses
nothing). Thread-safe.

Beside the trace, the ledger keeps a small state file (``lineage-<n>.state.json``) that the run's
console reads while the run goes: spending per role, the request being waited on (role, since
when, which attempt) and the requests that failed. It is written when the ledger is made, in the
lineage's own process with its roles: until then the console says the lineage is starting.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernelswarm.search import Usage

from .settings import SpendLimit
from .trace import LLMCall

MAX_PENDING = 1000  # calls kept for ``drain``; older ones stay only in the trace file
MAX_FAILURES = 20  # failed requests kept in the state file (the trace has them all)
STATE_SUFFIX = ".state.json"


def state_file(trace_path: Path) -> Path:
    """The state file beside a lineage's trace file."""
    return trace_path.with_name(trace_path.stem + STATE_SUFFIX)


@dataclass(frozen=True)
class Waiting:
    """A request a lineage is waiting on: which role, since when, which attempt of how many."""

    role: str
    request: str
    since: float  # Unix time the request started
    attempt: int
    attempts: int  # at most, retries included

    def describe(self, now: float | None = None) -> str:
        """E.g. "waiting on planner, 34 s, attempt 2/5"."""
        waited = max(0.0, (now if now is not None else time.time()) - self.since)
        return f"waiting on {self.role}, {waited:.0f} s, attempt {self.attempt}/{self.attempts}"


@dataclass(frozen=True)
class LedgerState:
    """What a state file holds: one lineage's spending per role, its wait, its failures."""

    lineage: int
    usage: dict[str, Usage]
    waiting: Waiting | None = None
    failures: tuple[str, ...] = ()  # "role: why", oldest first (the last MAX_FAILURES)
    failed: int = 0  # requests failed in all
    written: float = 0.0  # Unix time the state was written (0: by a version that did not say)

    @classmethod
    def read(cls, path: Path) -> LedgerState | None:
        """The state in ``path``; None where it is missing or being replaced."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            usage = {role: Usage(**figures) for role, figures in data["usage"].items()}
            waiting = Waiting(**data["waiting"]) if data.get("waiting") else None
            return cls(int(data["lineage"]), usage, waiting, tuple(data.get("failures", ())),
                       int(data.get("failed", 0)), float(data.get("written", 0.0)))
        except (OSError, ValueError, KeyError, TypeError):
            return None


def read_states(folder: Path) -> dict[int, LedgerState]:
    """Every lineage's state under a trace folder, by lineage."""
    states = {}
    if folder.is_dir():
        for path in sorted(folder.glob(f"*{STATE_SUFFIX}")):
            state = LedgerState.read(path)
            if state is not None:
                states[state.lineage] = state
    return states


@dataclass
class Ledger:
    """Spending of one lineage's roles: usage per role, a spending limit, the call trace.

    Each recorded call adds ``LLMCall.usage()`` to its role's ``Usage``. ``carried`` is spending
    made for the lineage elsewhere (the run's start-up requests) that counts against its limit
    without being its roles' usage. ``deadline`` (Unix time) is when every call must have ended.
    """

    lineage: int = 0
    limit: SpendLimit = field(default_factory=SpendLimit)
    trace_path: Path | None = None
    deadline: float | None = None
    carried: tuple[int, float] = (0, 0.0)  # tokens, dollars
    # What the deadline is, as a message names it when it cuts or refuses a call.
    deadline_name: str = "the search's wall-time budget (search.wall_time_s)"

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._usage: dict[str, Usage] = {}
        self._pending: deque[LLMCall] = deque(maxlen=MAX_PENDING)
        self._mark = (0, 0.0)  # tokens and cost at the last candidate made
        self._reserved = (0, 0.0)  # worst cases of the calls in flight
        self._closed: dict[str, str] = {}  # endpoint -> why no call goes to it any more
        self._waiting: Waiting | None = None
        self._failures: deque[str] = deque(maxlen=MAX_FAILURES)
        self._failed = 0
        if self.trace_path is not None:
            self.trace_path.parent.mkdir(parents=True, exist_ok=True)
            self._write_state()  # the lineage is up: its process and roles are made

    def record(self, call: LLMCall) -> None:
        """Account for one attempt and add it to the trace."""
        with self._lock:
            self._usage[call.role] = self._usage.get(call.role, Usage()) + call.usage()
            self._pending.append(call)
            if call.gave_up:
                self._failed += 1
                self._failures.append(f"{call.role}: {call.error or call.outcome}")
            if self.trace_path is not None:
                with open(self.trace_path, "a", encoding="utf-8") as handle:
                    handle.write(call.as_json() + "\n")
            self._write_state()

    def usage(self, role: str | None = None) -> Usage:
        """One role's usage, or (``role`` None) the lineage's total."""
        with self._lock:
            return self._total(role)

    def _total(self, role: str | None = None) -> Usage:
        if role is not None:
            return self._usage.get(role, Usage())
        total = Usage()
        for usage in self._usage.values():
            total = total + usage
        return total

    def stop_reason(self) -> str | None:
        """Why no further call may start (the spending limit), or None."""
        with self._lock:
            total = self._total()
            return self.limit.exceeded(total.tokens + self.carried[0],
                                       total.cost_usd + self.carried[1])

    def reserve(self, tokens: int, cost_usd: float, what: str) -> str | None:
        """Reserve a call's worst case against the limit; why it must not start, or None (then
        ``release`` the same figures once the call is recorded)."""
        with self._lock:
            total = self._total()
            reason = self.limit.refuses(
                total.tokens + self.carried[0] + self._reserved[0],
                total.cost_usd + self.carried[1] + self._reserved[1], tokens, cost_usd, what)
            if reason is None:
                self._reserved = (self._reserved[0] + tokens, self._reserved[1] + cost_usd)
            return reason

    def release(self, tokens: int, cost_usd: float) -> None:
        with self._lock:
            self._reserved = (self._reserved[0] - tokens, self._reserved[1] - cost_usd)

    def time_left(self) -> float | None:
        """Seconds until the deadline (negative once past), or None without one."""
        return None if self.deadline is None else self.deadline - time.time()

    @contextlib.contextmanager
    def share_of_time(self, share: float, name: str) -> Iterator[None]:
        """While the block runs, calls must end within ``share`` of the time left to the
        deadline (named ``name`` when it cuts one): a request that can be done without (the
        starting kernel's analysis) must leave the lineage's own requests the rest."""
        saved = self.deadline, self.deadline_name
        if self.deadline is not None:
            self.deadline = time.time() + share * max(0.0, self.deadline - time.time())
            self.deadline_name = name
        try:
            yield
        finally:
            self.deadline, self.deadline_name = saved

    def close(self, endpoint: str, reason: str) -> None:
        """No further call goes to ``endpoint`` from this lineage, because of ``reason``."""
        with self._lock:
            self._closed.setdefault(endpoint, reason)

    def closed(self, endpoint: str) -> str | None:
        with self._lock:
            return self._closed.get(endpoint)

    def waiting(self, waiting: Waiting | None) -> None:
        """Note the request being waited on (None: none now), for the run's console."""
        with self._lock:
            self._waiting = waiting
            self._write_state()

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

    def _write_state(self) -> None:
        """Replace the state file (atomically: a reader sees the old or the new one)."""
        if self.trace_path is None:
            return
        document: dict[str, Any] = {
            "lineage": self.lineage,
            "usage": {role: asdict(usage) for role, usage in self._usage.items()},
            "waiting": asdict(self._waiting) if self._waiting is not None else None,
            "failures": list(self._failures), "failed": self._failed, "written": time.time()}
        path = state_file(self.trace_path)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        temporary.write_text(json.dumps(document), encoding="utf-8")
        os.replace(temporary, path)
