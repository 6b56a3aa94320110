"""Whole ``kernelswarm run`` commands against servers that fail: one that never answers, one
that refuses every request (HTTP 400), one that answers garbage. Each run ends on time, exits
non-zero and says why on its last line; real Ray, g++ and sandbox. (A server that is not there
is refused before the run starts: test_endpoint_check.py.)"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from kernelswarm.agents.llm import LoopbackServer, Reply, always
from kernelswarm.experiments.commands.cli import main
from tests.agents.llm import answers
from tests.agents.llm.conftest import API_KEY, KEY_ENV, MODEL, PRICE

pytestmark = pytest.mark.slow


def _command(out_dir: Path, compile_cache: Path, url: str, *extra: str) -> list[str]:
    return ["run", *[arg for pair in (("--set", s) for s in [
        f'run.out_dir="{out_dir}"', "run.name=llm-fail", "search.lineages=2",
        "search.candidates_per_lineage=2", "tracking.mlflow=false",
        f'evaluator.cache_dir="{compile_cache}"', "timing.budget_s=0.05",
        "timing.min_repeats=5", "timing.max_repeats=30", "agent.kind=llm",
        "agent.backoff_s=0.01", f"agent.llm.model={MODEL}", f"agent.llm.base_url={url}",
        f'agent.llm.api_key_env="{KEY_ENV}"', *extra]) for arg in pair]]


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def _run(tmp_path: Path, capsys, command) -> tuple[int, str, Path, float]:
    """``main(command(out_dir))``: exit code, output, run folder, seconds. Run again (once)
    when the evaluator rejects the task's own starting kernel, which on a loaded machine its
    timing checks sometimes do: that is not what these tests are about."""
    for attempt in range(2):
        out_dir = tmp_path / f"runs{attempt}"
        started = time.monotonic()
        code = main(command(out_dir))
        elapsed = time.monotonic() - started
        out = capsys.readouterr().out
        if "the starting kernel fails evaluation" not in out:
            break
    run_dir, = out_dir.iterdir()
    return code, out, run_dir, elapsed


def test_a_hanging_server_ends_the_run_within_its_wall_time(tmp_path, compile_cache,
                                                             ray_session, capsys):
    """timeout_s 10, max_retries 4, wall_time_s 15: the search ends within wall_time_s of its
    start, which comes once the starting kernel is judged (the run's start-up before it is
    summary.json's startup_s), and the run one timeout_s after that. The tester's start-up
    request may take a third of wall_time_s (it is cut at 5 s); each lineage stops at the
    search's deadline and no LLM call outlives it; the timeout_s after it is for closing."""
    wall_s, timeout_s = 15, 10
    with LoopbackServer(always(Reply(hang=True)), api_key=API_KEY) as server:
        code, out, run_dir, elapsed = _run(tmp_path, capsys, lambda out_dir: _command(
            out_dir, compile_cache, server.url, f"search.wall_time_s={wall_s}",
            f"agent.llm.timeout_s={timeout_s}", "agent.llm.max_retries=4"))
        requests = len(server.requests)
    run_began = time.time() - elapsed
    calls = [json.loads(line) for path in (run_dir / "llm_calls").glob("*.jsonl")
             for line in path.read_text().splitlines()]
    last_call_end = max((c["started"] + c["latency_s"] for c in calls), default=run_began)
    last_call_end -= run_began
    # the tester's request, from its first attempt (none when start-up left it no time)
    tester = [c for c in calls if c.get("role") == "tester"]
    tester_s = (max(c["started"] + c["latency_s"] for c in tester)
                - min(c["started"] for c in tester)) if tester else 0.0
    summary = _summary(run_dir)
    startup_s = summary["startup_s"]
    print(f"\nhanging server: the run took {elapsed:.1f} s (start-up {startup_s:.1f} s, then "
          f"wall_time_s + timeout_s = {wall_s + timeout_s} s); the tester's request took "
          f"{tester_s:.1f} s, the last LLM call ended at {last_call_end:.1f} s; {requests} "
          f"requests")
    # one line says so where the start-up took longer than the search's own budget
    assert ("start-up took" in out) == (startup_s > wall_s), out
    assert tester_s < wall_s / 3 + 1.0  # the start-up share (1 s: HTTP and threads)
    # no call outlives the search's budget (1 s: HTTP and threads; 1 s: the command's own
    # start before the run's, from which startup_s counts)
    assert last_call_end < startup_s + wall_s + 2.0
    # and the lineages had all of it: their planners waited on the server until its end
    assert last_call_end > startup_s + wall_s - 2.0
    assert elapsed < startup_s + wall_s + timeout_s + 1.0, out
    assert code == 1
    last = out.strip().splitlines()[-1]
    # the planner stopped at the deadline
    assert last.startswith("error: no lineage proposed a candidate: ")
    assert "wall-time budget" in last
    assert "tester failed, no extra checks: tester (loopback-coder-1): " in out
    assert summary["llm"]["roles"]["tester"]["attempts"] <= 1  # cut at its share, 5 s
    assert summary["llm"]["start_up"]["failures"] == 1


@pytest.mark.parametrize("mode", ["HTTP 400", "garbage"])
def test_a_run_whose_agents_produce_nothing_exits_non_zero_saying_why(
        mode, tmp_path, compile_cache, ray_session, capsys):
    expected = {"HTTP 400": "refused after 1 attempt",
                "garbage": "3 malformed answers in a row"}[mode]
    with LoopbackServer(always(Reply(status=400, content="model not found") if mode == "HTTP 400"
                               else Reply("Sure, here is a faster kernel!")),
                        api_key=API_KEY) as server:
        code, out, run_dir, _ = _run(tmp_path, capsys, lambda out_dir: _command(
            out_dir, compile_cache, server.url, "agent.llm.max_retries=1",
            "search.wall_time_s=120"))
    last = out.strip().splitlines()[-1]
    assert code == 1, out
    assert last.startswith("error: no lineage proposed a candidate: planner stopped:"), last
    assert expected in last
    assert "tester failed" in out
    summary = _summary(run_dir)
    assert all(lineage["steps"] == 0 for lineage in summary["lineages"])
    assert summary["llm"]["total"]["failures"] >= 3  # the tester's, and each lineage's planner


def test_a_server_answering_far_beyond_max_tokens_cannot_overshoot_the_money_cap(
        tmp_path, compile_cache, ray_session, capsys):
    """Every answer 50 times max_tokens (800 kB), cost_usd 0.5 per lineage: each endpoint's
    first huge answer is refused and charged its request's worst case, no further request goes
    to it, and the run's charges stay within lineages x cost_usd."""
    cap, lineages = 0.5, 2
    with LoopbackServer(always(Reply(answers.plan("llm:big"), beyond_max_tokens=50)),
                        api_key=API_KEY) as server:
        code, out, run_dir, _ = _run(tmp_path, capsys, lambda out_dir: _command(
            out_dir, compile_cache, server.url, f"search.cost_usd={cap}",
            f'agent.prices."{MODEL}"={{prompt=3.0, completion=15.0}}'))
        claimed = list(server.requests)
    summary = _summary(run_dir)
    charged = summary["llm"]["total"]["cost_usd"]
    traces = [json.loads(line) for path in (run_dir / "llm_calls").glob("*.jsonl")
              for line in path.read_text().splitlines()]
    claims = sum(PRICE.cost(c["prompt_tokens"], c["reported_completion_tokens"])
                 for c in traces if c["outcome"] == "oversized")
    worst = max(c["cost_usd"] for c in traces)
    print(f"\nhuge answers: {len(claimed)} requests, charged ${charged:.4f} for a cap of "
          f"${cap} x {lineages} lineages (one call's reserved worst case ${worst:.4f}); the "
          f"server claimed ${claims:.2f}")
    assert code == 1 and "more than the request allowed" in out.strip().splitlines()[-1]
    assert all(c["outcome"] == "oversized" for c in traces)
    assert charged <= cap * lineages and claims > cap * lineages
    assert len(claimed) <= 1 + lineages * 2  # the tester's, then per lineage an analyst's and a
    # planner's at most (the starting kernel's analysis is shared)
