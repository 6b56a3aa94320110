"""The client against a real HTTP server on loopback: retries, time limits, re-asks, accounting,
spending limits and keys, through the real openai package."""

from __future__ import annotations

import time

import pytest

from kernelswarm.agents.llm import (
    ChatClient,
    Ledger,
    LLMError,
    LLMPlanner,
    MissingAPIKey,
    Reply,
    RoleModel,
    SpendLimit,
    llm_roles,
)
from kernelswarm.agents.llm.answers import parse_plan
from kernelswarm.search import STOP, LineageView, load_task
from tests.agents.llm import answers
from tests.agents.llm.conftest import API_KEY, KEY_ENV, MODEL, PRICE, settings_for
from tests.conftest import SILU_TASK

TASK = load_task(SILU_TASK)
START = TASK.starting_candidate("cpp")
VIEW = LineageView(0, 0, START, None, None, (), None)


def planner(server, ledger: Ledger | None = None, **settings) -> LLMPlanner:
    roles = llm_roles(settings_for(server, **settings), TASK, "cpp", ledger=ledger)
    assert isinstance(roles.planner, LLMPlanner)
    return roles.planner


def test_a_rate_limit_then_success_is_retried_and_the_answer_used(server):
    server.push(Reply(status=429, headers={"retry-after": "0"}),
                Reply(answers.plan("llm:vectorise"), prompt_tokens=1000, completion_tokens=200))
    role = planner(server)
    plan = role.plan(VIEW)
    assert plan.move == "llm:vectorise" and "vectorises" in plan.rationale
    assert len(server.requests) == 2
    outcomes = [call.outcome for call in role.ledger.drain()]
    assert outcomes == ["rate_limited", "ok"]
    usage = role.usage()
    assert (usage.calls, usage.failures, usage.malformed) == (1, 0, 0)
    assert usage.prompt_tokens == 1000 and usage.completion_tokens == 200
    assert usage.cost_usd == pytest.approx(PRICE.cost(1000, 200)) == pytest.approx(0.006)


def test_server_errors_past_the_retries_stop_the_lineage_saying_why(server):
    server.push(*[Reply(status=500, content="overloaded")] * 3)
    role = planner(server, max_retries=2)
    plan = role.plan(VIEW)
    assert plan.move == STOP
    assert "server_error after 3 attempts" in plan.rationale and "overloaded" in plan.rationale
    assert len(server.requests) == 3 and role.usage().failures == 1


def test_an_answer_slower_than_the_time_limit_is_retried_then_given_up(server):
    server.push(*[Reply(answers.plan("llm:late"), delay_s=1.5)] * 2)
    role = planner(server, timeout_s=0.3, max_retries=1)
    started = time.monotonic()
    plan = role.plan(VIEW)
    elapsed = time.monotonic() - started
    assert plan.move == STOP and "timeout after 2 attempts: no answer within 0.3 s" in plan.rationale
    assert elapsed < 1.5  # the client gave up at its limit, not when the server answered
    calls = role.ledger.drain()
    assert [c.outcome for c in calls] == ["timeout", "timeout"] and calls[-1].gave_up
    assert all(0.25 < c.latency_s < 1.0 for c in calls)


def test_garbage_is_asked_again_with_a_precise_message_and_counted(server):
    server.push(Reply("I think we should make it faster!"),
                Reply("```json\n{\"move\": \"llm:x\", rationale: oops}\n```"),
                Reply(answers.plan("llm:fast-exp")))
    role = planner(server)
    assert role.plan(VIEW).move == "llm:fast-exp"
    second, third = server.requests[1].messages, server.requests[2].messages
    assert second[-2] == {"role": "assistant", "content": "I think we should make it faster!"}
    assert "could not be used: there is no ```json block" in second[-1]["content"]
    assert "the ```json block is not valid JSON: Expecting property name" in third[-1]["content"]
    assert role.usage().malformed == 2 and role.usage().calls == 3


def test_answers_that_stay_malformed_give_up_after_the_re_asks(server):
    server.push(*[Reply("no idea")] * 3)
    role = planner(server, max_format_retries=2)
    plan = role.plan(VIEW)
    assert plan.move == STOP and "3 malformed answers in a row" in plan.rationale
    assert role.usage().malformed == 3 and role.usage().failures == 1


SHORT = [{"role": "user", "content": "x" * 92}]  # 100 bytes with the format's 8: bound 108


def test_a_spending_limit_stops_calls_before_they_start(server):
    """Each call reserves its worst case: 108 prompt tokens (one per byte, a bound) plus
    max_tokens 100; a call starts only while what was spent plus that fits the limit."""
    server.responder = lambda received: Reply("fine", prompt_tokens=30, completion_tokens=20)
    settings = settings_for(server, max_tokens=100)
    client = ChatClient("planner", settings, Ledger(0, SpendLimit(tokens=300)))
    assert client.ask("planner", SHORT, str) == "fine"  # 0 + 208 <= 300
    with pytest.raises(LLMError) as raised:  # 50 + 208 <= 300, then 100 + 208 > 300
        for _ in range(3):
            client.ask("planner", SHORT, str)
    assert raised.value.kind == "budget" and len(server.requests) == 2
    assert str(raised.value) == ("LLM token budget reached: 100 tokens spent, and a planner "
                                 "request may take up to 208 more (limit 300)")


def test_a_money_limit_counts_with_the_price_table(server):
    server.responder = lambda received: Reply("fine", prompt_tokens=30, completion_tokens=20)
    settings = settings_for(server, max_tokens=100)  # worst case 108 * $3 + 100 * $15 per 1M
    worst = PRICE.cost(108, 100)
    client = ChatClient("planner", settings, Ledger(0, SpendLimit(cost_usd=2.5 * worst)))
    answers_ = []
    with pytest.raises(LLMError, match="LLM money budget reached"):
        for _ in range(20):
            answers_.append(client.ask("planner", SHORT, str))
    spent = client.ledger.usage().cost_usd
    assert spent == pytest.approx(len(answers_) * PRICE.cost(30, 20))
    assert len(answers_) == 8 == len(server.requests)  # 8 * $0.00039 + $0.001824 > $0.00456
    assert spent + worst > 2.5 * worst >= spent  # stopped only when the next call might not fit


def test_a_wrong_key_is_refused_at_once_and_a_missing_one_names_its_variable(server,
                                                                             monkeypatch):
    settings = settings_for(server)
    monkeypatch.setenv("OTHER_API_KEY", "sk-wrong")
    wrong = RoleModel(MODEL, base_url=server.url, api_key_env="OTHER_API_KEY", max_retries=3)
    client = ChatClient("planner", settings.__class__(
        roles={**settings.roles, "planner": wrong}), Ledger())
    with pytest.raises(LLMError) as raised:
        client.ask("planner", [{"role": "user", "content": "hi"}], str)
    assert raised.value.kind == "refused" and "401" in str(raised.value)
    assert len(server.requests) == 0  # refused before the script: a bad key is not retried
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(MissingAPIKey, match=f"{KEY_ENV} is not set"):
        ChatClient("coder", settings, Ledger())


def test_the_key_is_in_no_trace_and_no_repr(server, tmp_path):
    server.push(Reply(status=503), Reply(answers.plan("llm:a")))
    ledger = Ledger(0, trace_path=tmp_path / "trace.jsonl")
    role = planner(server, ledger)
    role.plan(VIEW)
    assert all(r.authorised for r in server.requests)  # the key did reach the server
    text = (tmp_path / "trace.jsonl").read_text()
    assert text.count("\n") == 2 and '"outcome": "server_error"' in text
    assert API_KEY not in text and API_KEY not in repr(role.client)
    assert API_KEY not in repr(role.client.settings)


def test_a_plan_answer_is_read_strictly():
    from kernelswarm.agents.llm import MalformedAnswer, MoveChoice

    choice = MoveChoice(rewrites=("fast_exp",), can_tune=False, can_adopt=False)
    assert parse_plan(answers.plan("rewrite:fast_exp"), choice).move == "rewrite:fast_exp"
    for move, message in [("tune", "no knobs"), ("rewrite:unroll", "names no built-in"),
                          ("llm:Big Change", "must be 1-48 characters"), ("faster", "unknown move"),
                          ("adopt", "no other lineage")]:
        with pytest.raises(MalformedAnswer, match=message):
            parse_plan(answers.plan(move), choice)
    with pytest.raises(MalformedAnswer, match="needs a \"rationale\""):
        parse_plan(answers.plan("llm:x", ""), choice)
