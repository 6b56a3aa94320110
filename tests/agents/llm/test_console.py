"""What a person sees of the LLM roles while a run goes and when it ends: who waits on which
model, spending per role, failures as they happen, one-line stop reasons; and the tester's
start-up request counted against a lineage's limit. Ledgers write the state files the console
reads, as the lineages of a run do; requests go to the loopback server."""

from __future__ import annotations

import io
import time
from dataclasses import replace

from rich.console import Console

from kernelswarm.agents.llm import (
    START_LINEAGE,
    Ledger,
    LLMCall,
    LLMRoleFactory,
    Reply,
    SpendLimit,
    Waiting,
    trace_file,
)
from kernelswarm.cluster.lineage_actor import LineageResult
from kernelswarm.cluster.swarm import SwarmResult
from kernelswarm.experiments.agent.llm_view import LLMWatch, spending_table
from kernelswarm.experiments.agent.roles import ask_tester
from kernelswarm.experiments.config import load_config
from kernelswarm.experiments.run.execute import RunOutcome
from kernelswarm.experiments.views.progress import _status_line, closing_table, progress_table
from kernelswarm.search import RunSummary, Usage
from tests.agents.llm import answers
from tests.agents.llm.conftest import KEY_ENV, MODEL, settings_for
from tests.conftest import SILU_TASK


def _text(renderable: object, width: int = 200) -> str:
    console = Console(file=io.StringIO(), width=width)
    console.print(renderable)
    return console.file.getvalue()


def _call(lineage: int, role: str, tokens: int, cost: float, gave_up: bool = False) -> LLMCall:
    return LLMCall(lineage, role, role, MODEL, 1, "timeout" if gave_up else "ok", (),
                   prompt_tokens=tokens, completion_tokens=tokens // 10, cost_usd=cost,
                   error="no answer within 10 s from http://x/v1" if gave_up else "",
                   gave_up=gave_up)


def test_the_live_view_shows_waits_and_spending_and_failures_are_printed_once(tmp_path):
    folder = tmp_path / "llm_calls"
    watch = LLMWatch(tmp_path)
    first, second = (Ledger(n, trace_path=trace_file(folder, n)) for n in (0, 1))
    first.record(_call(0, "planner", 1000, 0.01))
    second.record(_call(1, "coder", 2000, 0.05))
    second.record(_call(1, "analyst", 0, 0.0, gave_up=True))
    second.waiting(Waiting("planner", "planner", time.time() - 34, 2, 5))
    stats = {"records": 3, "lineages": {0: {"steps": 1, "best": 1.2, "last_move": "llm:x",
                                            "last_status": "OK"}}, "llm": watch.stats()}
    view = _text(progress_table(stats, 12.0))
    assert "waiting on planner, 34 s, attempt 2/5" in view  # lineage 1 has no record yet
    assert "LLM: planner 1,100 tok $0.0100 · coder 2,200 tok $0.0500 · analyst 0 tok $0.0000 " \
        "· total 3,300 tok $0.0600" in view
    assert "lineage 1 waiting on planner, 34 s, attempt 2/5" in _status_line(stats, 12.0)
    console = Console(file=io.StringIO(), width=200)
    watch.echo(console)
    watch.echo(console)
    printed = console.file.getvalue()
    assert printed.count("lineage 1: LLM request failed: analyst: no answer within 10 s") == 1
    summary = watch.summary()
    assert summary["roles"]["coder"]["tokens"] == 2200 and summary["total"]["failures"] == 1
    table = _text(spending_table(summary))
    assert "LLM spending per role" in table and "$0.0600" in table


def test_lineages_whose_process_is_not_up_yet_are_said_to_be_starting(tmp_path):
    """After the start's verdict, seconds may pass before a lineage's Ray worker process has
    imported the task and made its roles: the view says so instead of showing nothing. A
    resumed run's state files from before do not count as started."""
    folder = tmp_path / "llm_calls"
    Ledger(1, trace_path=trace_file(folder, 1))  # lineage 1's, from the run's earlier session
    time.sleep(0.01)
    watch = LLMWatch(tmp_path, lineages=2)

    def line() -> str:
        return _status_line({"records": 1, "best": 1.0, "llm": watch.stats()}, 0.5)

    assert "lineage 0 starting its process (imports, roles, compiler); lineage 1 starting " \
        "its process" in line()
    assert "LLM: no request made yet" in line()
    Ledger(0, trace_path=trace_file(folder, 0))  # made in lineage 0's process, with its roles
    assert "lineage 0 starting" not in line() and "lineage 1 starting" in line()
    view = _text(progress_table({"records": 1, "llm": watch.stats()}, 0.5))
    assert "starting its process (imports, roles, compiler)" in view
    Ledger(1, trace_path=trace_file(folder, 1)).waiting(
        Waiting("analyst", "analyst", time.time(), 1, 5))
    assert "starting" not in line() and "lineage 1 waiting on analyst, 0 s" in line()
    assert LLMWatch(tmp_path).stats()["waiting"] == {1: "waiting on analyst, 0 s, attempt 1/5"}


def test_a_stop_reason_quoting_a_fenced_example_stays_on_one_line_and_nothing_made_fails():
    reason = ("planner stopped: planner: 3 malformed answers in a row; the last: there is no "
              "```json block; put it in one, e.g. ```json {\"move\": \"llm:x\"} ```")
    result = SwarmResult(RunSummary(reason, 1, None, {}, 1.0), None,
                         [LineageResult(0, 0, reason, 0.0), LineageResult(1, 0, reason, 0.0)],
                         [], [], {})
    table = _text(closing_table(result), width=120)
    assert "```" not in table and "{" not in table
    assert len([line for line in table.splitlines() if "planner stopped: planner" in line]) == 2
    failure = RunOutcome(None, result, None).failure  # type: ignore[arg-type]
    assert failure == ("no lineage proposed a candidate: planner stopped: planner: 3 malformed "
                       "answers in a row; the last: there is no ```json block; put it in one, "
                       "e.g. ```json {\"move\": \"llm:x\"} ```")  # its words as they are
    made = replace(result, lineages=[LineageResult(0, 2, reason, 1.1)])
    assert RunOutcome(None, made, None).failure is None  # type: ignore[arg-type]


def test_the_testers_start_up_request_counts_against_lineage_0s_limit(server, tmp_path,
                                                                      silu_task):
    server.push(Reply(answers.checks(), prompt_tokens=1000, completion_tokens=500))
    config = load_config(None, ["agent.kind=llm", f"agent.llm.model={MODEL}",
                                f"agent.llm.base_url={server.url}",
                                f'agent.llm.api_key_env="{KEY_ENV}"', "search.tokens=200000"])
    settings = replace(settings_for(server), limit=SpendLimit(tokens=200000))
    factory = LLMRoleFactory(settings, SILU_TASK, "cpp", trace_dir=tmp_path,
                             lineage_of_seed={7: 0})
    start_up = ask_tester(config, silu_task, factory, seed=7)
    assert start_up.checks == () and start_up.failure == ""
    assert start_up.usage.tokens == 1500
    assert trace_file(tmp_path, START_LINEAGE).is_file()  # traced as the run's, not lineage 0's
    assert not trace_file(tmp_path, 0).exists()
    lineage0 = start_up.make_roles(7).planner.ledger
    assert lineage0.carried == (1500, start_up.usage.cost_usd)
    assert lineage0.usage() == Usage()  # not its roles' own spending
    assert lineage0.reserve(198_501, 0.0, "a call") is not None  # 1,500 + 198,501 > 200,000
    assert lineage0.reserve(198_500, 0.0, "a call") is None
