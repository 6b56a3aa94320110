"""The LLM call trace: what the ledger writes is what the MLflow sink reads, call for call, and
both sum it into the same ``Usage``."""

from __future__ import annotations

import pytest

from kernelswarm.agents.llm import Ledger, LLMCall, TraceError
from kernelswarm.agents.llm.trace import MALFORMED, OK, RATE_LIMITED, trace_file
from kernelswarm.experiments.sinks.llm_trace import TraceFollower, call_artifact, usage_by_role
from kernelswarm.search import Usage


def _call(role: str, outcome: str, tokens: int, gave_up: bool = False) -> LLMCall:
    return LLMCall(lineage=3, role=role, request=role, model="m", attempt=1, outcome=outcome,
                   messages=({"role": "user", "content": "write a kernel"},),
                   answer="```cpp\n// k\n```" if outcome != RATE_LIMITED else "",
                   prompt_tokens=tokens, completion_tokens=tokens // 4, cost_usd=tokens * 1e-6,
                   latency_s=0.5, started=1_700_000_000.0, gave_up=gave_up)


CALLS = [_call("coder", OK, 1000), _call("coder", MALFORMED, 800),
         _call("planner", RATE_LIMITED, 0), _call("planner", RATE_LIMITED, 0, gave_up=True),
         _call("analyst", OK, 300)]


def test_a_call_survives_its_trace_line():
    for call in CALLS:
        assert LLMCall.from_json(call.as_json()) == call


@pytest.mark.parametrize("line, message", [
    ('{"lineage": 0}', "lacks 'role'"),
    ("[1, 2]", "holds a list, not an object"),
    ("not json", "not JSON"),
    (_call("coder", OK, 1).as_json().replace('"ok"', '"fine"'), "outcome 'fine' is not one of"),
])
def test_a_line_that_is_not_a_call_is_refused_by_name(line, message):
    with pytest.raises(TraceError, match=message):
        LLMCall.from_json(line)


def test_the_sink_reads_back_what_the_ledger_wrote_and_tallies_it_the_same(tmp_path):
    ledger = Ledger(lineage=3, trace_path=trace_file(tmp_path, 3))
    for call in CALLS[:3]:
        ledger.record(call)
    follower = TraceFollower(tmp_path)
    assert follower.lineages() == [3]
    first = follower.new_calls(3)
    for call in CALLS[3:]:
        ledger.record(call)
    rest = follower.new_calls(3)
    assert [i for i, _ in first + rest] == list(range(len(CALLS)))
    assert [c for _, c in first + rest] == CALLS
    totals = usage_by_role(c for _, c in first + rest)
    for role in ("coder", "planner", "analyst"):
        assert totals[role] == ledger.usage(role)
    assert totals["coder"] == Usage(calls=2, prompt_tokens=1800, completion_tokens=450,
                                    cost_usd=pytest.approx(1800e-6), malformed=1, failures=0,
                                    attempts=2, latency_s=1.0)
    assert (totals["planner"].calls, totals["planner"].failures) == (0, 1)
    assert ledger.usage().tokens == sum(u.tokens for u in totals.values())


def test_a_call_artifact_holds_the_prompt_and_the_answer():
    path, text = call_artifact(7, CALLS[0])
    assert path == "llm_calls/00007-coder-ok.json"
    assert LLMCall.from_json(text) == CALLS[0]
