"""Limits that hold whatever the server does, against the loopback server through the real
openai client: answers larger than max_tokens, a server that never answers, one that is not
there; what the run's console reads of a lineage waiting on a model."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from kernelswarm.agents.llm import (
    ChatClient,
    Ledger,
    LLMError,
    LLMPlanner,
    LoopbackServer,
    Reply,
    SpendLimit,
    always,
    llm_roles,
    read_states,
)
from kernelswarm.agents.llm.client import prompt_bound
from kernelswarm.agents.llm.trace import OVERSIZED, trace_file
from kernelswarm.search import STOP, LineageView, load_task
from tests.agents.llm import answers
from tests.agents.llm.conftest import API_KEY, PRICE, settings_for
from tests.conftest import SILU_TASK

TASK = load_task(SILU_TASK)
START = TASK.starting_candidate("cpp")
VIEW = LineageView(0, 0, START, None, None, (), None)
MAX_TOKENS = 1000


def planner(server, ledger: Ledger, **settings) -> LLMPlanner:
    roles = llm_roles(settings_for(server, max_tokens=MAX_TOKENS, **settings), TASK, "cpp",
                      ledger=ledger)
    assert isinstance(roles.planner, LLMPlanner)
    return roles.planner


def test_huge_answers_cannot_overshoot_the_money_cap(server, tmp_path):
    """Answers of five times max_tokens: the first is refused and charged the request's worst
    case; its endpoint gets no further request; the cap holds."""
    server.responder = always(Reply(answers.plan("llm:big"), beyond_max_tokens=5))
    role = planner(server, Ledger(0, SpendLimit(cost_usd=0.5), trace_file(tmp_path, 0)))
    plan = role.plan(VIEW)
    assert plan.move == STOP and "more than the request allowed (max_tokens 1,000)" in \
        plan.rationale and "5,000 completion tokens" in plan.rationale
    again = role.plan(VIEW)
    assert again.move == STOP and len(server.requests) == 1  # not asked again
    call, = role.ledger.drain()
    reserved = PRICE.cost(prompt_bound(server.requests[0].messages), MAX_TOKENS)
    assert call.outcome == OVERSIZED and call.reported_completion_tokens == 5000
    assert call.cost_usd == pytest.approx(reserved) and call.completion_tokens == MAX_TOKENS
    assert role.usage().cost_usd == pytest.approx(reserved) and reserved <= 0.5
    assert len(server.requests[0].body["messages"]) == 2
    assert server.requests[0].body["max_tokens"] == MAX_TOKENS


@pytest.mark.parametrize("cap", [0.06, 0.2])
def test_the_cap_holds_as_spending_nears_it_whatever_the_answers(server, cap):
    """Answers as costly as a request allows (prompt tokens at the bound, max_tokens of
    answer), then huge ones: each call reserved its worst case first, so what is spent never
    passes the cap, and no call starts once its worst case would not fit."""
    count = iter(range(1000))

    def costly(received):
        if next(count) < 4:
            return Reply(answers.plan("llm:a"), prompt_tokens=prompt_bound(received.messages),
                         completion_tokens=MAX_TOKENS)
        return Reply(answers.plan("llm:huge"), beyond_max_tokens=40)

    server.responder = costly
    role = planner(server, Ledger(0, SpendLimit(cost_usd=cap)))
    plans = [role.plan(VIEW) for _ in range(12)]
    worst = [PRICE.cost(prompt_bound(r.messages), MAX_TOKENS) for r in server.requests]
    spent = role.usage().cost_usd
    claimed = sum(w if i < 4 else PRICE.cost(prompt_bound(r.messages), 40 * MAX_TOKENS)
                  for i, (w, r) in enumerate(zip(worst, server.requests, strict=True)))
    print(f"\ncap ${cap}, spent ${spent:.4f} (overshoot ${spent - cap:+.4f}), the server's "
          f"claims ${claimed:.4f}, one call's reserved worst case ${max(worst):.4f}, "
          f"{len(server.requests)} requests, moves {[p.move for p in plans]}")
    assert spent == pytest.approx(sum(worst)) and spent <= cap  # each call at its worst case
    assert spent - cap <= max(worst)  # the guarantee asked for, with room to spare
    stops = [p.rationale for p in plans if p.move == STOP]
    if len(server.requests) < 5:  # the cap stopped it: the next call's worst case did not fit
        assert stops[0].startswith(f"LLM money budget reached: ${spent:.4f} spent, "
                                   f"and a planner request may cost up to $")
        assert spent + worst[-1] > cap
    else:  # the huge answer: refused, and its endpoint not asked again
        assert len(server.requests) == 5 and "more than the request allowed" in stops[0]
        assert claimed > cap


def test_a_hanging_server_is_cut_at_the_deadline_and_retries_stop_there(server, tmp_path):
    server.responder = always(Reply(hang=True))
    ledger = Ledger(0, SpendLimit(), trace_file(tmp_path, 0), deadline=time.time() + 2.0)
    role = planner(server, ledger, timeout_s=1.5, max_retries=4)
    seen: list[str] = []

    def watch() -> None:  # what the run's console reads while the lineage waits
        while not done.is_set():
            state = read_states(tmp_path).get(0)
            if state is not None and state.waiting is not None:
                seen.append(state.waiting.describe())
            time.sleep(0.1)

    done = threading.Event()
    watcher = threading.Thread(target=watch)
    watcher.start()
    started = time.monotonic()
    plan = role.plan(VIEW)
    elapsed = time.monotonic() - started
    done.set()
    watcher.join()
    assert plan.move == STOP and "wall-time budget" in plan.rationale
    assert elapsed < 2.0 + 1.0  # the deadline, plus the machine's slack; never 5 x 1.5 s
    assert 2 <= len(server.requests) <= 3
    assert "waiting on planner, 0 s, attempt 1/5" in seen
    assert any(s.startswith("waiting on planner, 1 s, attempt 1/5") for s in seen)
    assert read_states(tmp_path)[0].waiting is None  # nothing waited on any more
    assert "planner: no answer within" in read_states(tmp_path)[0].failures[-1]
    assert role.plan(VIEW).rationale.endswith("(search.wall_time_s) has ended")


def test_no_server_names_the_endpoint_and_an_answer_without_usage_is_bounded_too(tmp_path):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with LoopbackServer(api_key=API_KEY) as server:
        settings = settings_for(server, max_tokens=MAX_TOKENS, max_retries=1)
        dead = {name: role.__class__(**{**role.__dict__, "base_url": f"http://127.0.0.1:{port}/v1"})
                for name, role in settings.roles.items()}
        client = ChatClient("coder", settings.__class__(**{**settings.__dict__, "roles": dead}),
                            Ledger())
        with pytest.raises(LLMError) as raised:
            client.ask("coder", [{"role": "user", "content": "hi"}], str)
        assert raised.value.kind == "connection_error"
        assert f"(endpoint http://127.0.0.1:{port}/v1)" in str(raised.value)
        server.push(Reply("x" * (2 << 20), usage=False))  # 2 MB, no usage
        client = ChatClient("coder", settings, Ledger())
        with pytest.raises(LLMError, match="524,288 completion tokens .estimated from the text."):
            client.ask("coder", [{"role": "user", "content": "hi"}], str)


def test_a_role_refused_after_another_roles_oversized_answer_names_that_request(server):
    """The analyst's request gets an oversized answer: the endpoint is closed, and the
    planner's stop reason says it was the analyst's request, not its own."""
    server.responder = always(Reply(answers.plan("llm:big"), beyond_max_tokens=5))
    roles = llm_roles(settings_for(server, max_tokens=MAX_TOKENS), TASK, "cpp",
                      ledger=Ledger(0, SpendLimit()))
    with pytest.raises(LLMError):
        roles.analyst.client.ask("analyst", [{"role": "user", "content": "profile"}], str)
    plan = roles.planner.plan(VIEW)
    assert plan.move == STOP and len(server.requests) == 1  # the planner sent nothing
    assert plan.rationale.startswith("planner: no request sent, after the analyst's analyst "
                                     "request: the server")


def test_the_start_ups_own_share_of_the_wall_time_is_named_when_it_ends(server, tmp_path):
    from kernelswarm.agents.llm import LLMRoleFactory

    server.responder = always(Reply(hang=True))
    settings = settings_for(server, timeout_s=5.0, max_retries=0, wall_s=3.0)
    factory = LLMRoleFactory(settings, SILU_TASK, "cpp", trace_dir=tmp_path)
    tester = factory.start_up(0).tester
    began = time.monotonic()
    with pytest.raises(LLMError) as cut:  # its share: a third of the search's 3 s, not 5 s
        tester.client.ask("tester", [{"role": "user", "content": "checks"}], str)
    assert time.monotonic() - began < 1.0 + 0.5
    assert "the start-up's time for model calls" in str(cut.value)
    assert "the search's wall-time budget" not in str(cut.value)
    # a lineage's roles have no deadline until the search starts, then the search's budget
    roles = factory(0)
    assert roles.planner.ledger.deadline is None
    roles.until(time.time() + 1.0)
    with pytest.raises(LLMError) as cut:
        roles.coder.client.ask("coder", [{"role": "user", "content": "code"}], str)
    assert "the search's wall-time budget (search.wall_time_s)" in str(cut.value)


def test_a_hanging_model_leaves_the_planner_time_after_the_starting_kernels_analysis(
        server, tmp_path):
    """Every lineage's first step waits on the starting kernel's analysis: against a server
    that never answers it takes its share of the time left, and the planner is still asked."""
    from kernelswarm.search import Evaluation, ShapeResult, Status

    server.responder = always(Reply(hang=True))
    ledger = Ledger(0, SpendLimit(), deadline=time.time() + 4.0)
    roles = llm_roles(settings_for(server, timeout_s=30.0, max_retries=3), TASK, "cpp",
                      ledger=ledger, shared_dir=tmp_path)
    ok = Evaluation(START.id, Status.OK, "ok", shapes=(ShapeResult(
        "d=4096,tokens=1", correct=True, time_us=10.0, speedup_vs_start=1.0),))
    started = time.monotonic()
    feedback = roles.analyst.analyse(START, ok)
    assert time.monotonic() - started < 2.0  # a quarter of the 4 s, not 4 x 30 s
    assert "the starting kernel's analysis's share" in feedback.facts.analyst_error
    plan = roles.planner.plan(VIEW)
    assert plan.move == STOP  # the server hangs; what matters: the planner asked it
    assert server.received("planner")
