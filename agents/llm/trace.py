"""The LLM call trace: one record type (``LLMCall``), the files it is kept in, what a call spent.

The LLM roles of lineage ``n`` append every call attempt to ``<trace folder>/lineage-<n>.jsonl``
as one JSON object a line (``LLMCall.as_json``); readers (the MLflow sink) turn each line back
into an ``LLMCall`` with ``LLMCall.from_json``, so writer and readers agree by type, not by
file name and key spelling. No import of the openai package here: the sinks read traces too.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from kernelswarm.search import Usage

TRACE_FOLDER = "llm_calls"  # under a run folder
_TRACE_FILE = re.compile(r"lineage-(-?\d+)\.jsonl")

# Outcomes of one call attempt.
OK = "ok"  # an answer that parsed
MALFORMED = "malformed"  # an answer that did not parse; asked again with the reason
RATE_LIMITED = "rate_limited"  # HTTP 429
SERVER_ERROR = "server_error"  # HTTP 5xx
TIMEOUT = "timeout"  # no answer within the role's timeout_s
CONNECTION_ERROR = "connection_error"
REFUSED = "refused"  # any other HTTP error (bad key, unknown model): not retried
# An answer larger than the request allowed (usage above max_tokens): not used, charged the
# request's worst case, and its endpoint is not asked again by the lineage.
OVERSIZED = "oversized"
RETRYABLE = (RATE_LIMITED, SERVER_ERROR, TIMEOUT, CONNECTION_ERROR)
OUTCOMES = (OK, MALFORMED, *RETRYABLE, REFUSED, OVERSIZED)
# The lineage under which a run records its starting kernel, and so the requests made for the
# whole run before the lineages start (the tester's).
START_LINEAGE = -1


class TraceError(ValueError):
    """A trace line that is not an ``LLMCall``; the message names the field."""


@dataclass(frozen=True)
class LLMCall:
    """One attempt at one request: what was sent, what came back, what it cost and took."""

    lineage: int
    role: str  # planner | coder | tester | analyst
    request: str  # planner | coder | repair | tester | analyst
    model: str
    attempt: int  # 1 for the first try of a request; retries and re-asks count up
    outcome: str  # one of OUTCOMES
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
    # OVERSIZED only: the completion tokens the server reported (the call is charged
    # ``completion_tokens``, the request's max_tokens)
    reported_completion_tokens: int | None = None

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def answered(self) -> bool:
        """Whether the answer parsed (outcome ``OK``)."""
        return self.outcome == OK

    def usage(self) -> Usage:
        """What this attempt spent, as one term of a role's ``Usage``: an answer received (parsed
        or not) counts as a call; an attempt that ended its request without an answer that could
        be used counts as a failure."""
        answered = self.outcome in (OK, MALFORMED, OVERSIZED)
        return Usage(calls=int(answered), prompt_tokens=self.prompt_tokens,
                     completion_tokens=self.completion_tokens, cost_usd=self.cost_usd,
                     malformed=int(self.outcome == MALFORMED), failures=int(self.gave_up),
                     attempts=1, latency_s=self.latency_s)

    def as_json(self) -> str:
        """The call as one line of its trace file."""
        return json.dumps({**asdict(self), "messages": [dict(m) for m in self.messages]})

    @classmethod
    def from_json(cls, line: str) -> LLMCall:
        """The call a trace line holds; ``TraceError`` names what is missing or mistyped."""
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(f"a trace line is not JSON: {exc.msg}") from None
        if not isinstance(data, dict):
            raise TraceError(f"a trace line holds a {type(data).__name__}, not an object")
        values = {}
        for field in dataclasses.fields(cls):
            if field.name not in data:
                if field.default is dataclasses.MISSING:
                    raise TraceError(f"a trace line lacks {field.name!r}")
                continue
            values[field.name] = data[field.name]
        if not isinstance(values["messages"], list):
            raise TraceError("a trace line's 'messages' is not a list")
        values["messages"] = tuple(dict(m) for m in values["messages"])
        if values["outcome"] not in OUTCOMES:
            raise TraceError(f"a trace line's outcome {values['outcome']!r} is not one of "
                             f"{', '.join(OUTCOMES)}")
        return cls(**values)


def trace_file(folder: Path, lineage: int) -> Path:
    """The file lineage ``lineage``'s calls are appended to."""
    return folder / f"lineage-{lineage}.jsonl"


def trace_lineage(path: Path) -> int | None:
    """The lineage a trace file belongs to, or None for a file that is not a trace."""
    found = _TRACE_FILE.fullmatch(path.name)
    return int(found.group(1)) if found else None
