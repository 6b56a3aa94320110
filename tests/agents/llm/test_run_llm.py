"""End to end: ``kernelswarm run`` with the LLM agent against a scripted OpenAI-protocol server
on loopback; real Ray, g++, sandbox, SQLite MLflow and Parquet."""

from __future__ import annotations

import io
import itertools
import json
import threading
from pathlib import Path

import pytest
from rich.console import Console

from kernelswarm.agents.llm import LoopbackServer, Reply
from kernelswarm.experiments.config import load_config
from kernelswarm.experiments.run.execute import run
from kernelswarm.experiments.sinks import read_evaluations, read_mlflow_run
from tests.agents.llm import answers
from tests.agents.llm.conftest import API_KEY, KEY_ENV, MODEL

pytestmark = pytest.mark.slow


class Model:
    """Codes a kernel that does not compile, then a wrong one, then correct fast ones; repairs
    with correct fast ones; a rate limit first of all."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._code = itertools.chain([answers.BROKEN, answers.WRONG],
                                     (answers.FAST + f"// variant {i}\n" for i in itertools.count()))
        self._repairs = itertools.count()

    def __call__(self, received):
        with self._lock:
            if received.request == "planner":
                return Reply(answers.plan("llm:fast-exp"))
            if received.request == "coder":
                return Reply(answers.kernel(next(self._code)))
            if received.request == "repair":
                return Reply(answers.kernel(answers.FAST + f"// repair {next(self._repairs)}\n"))
            if received.request == "tester":
                return Reply(answers.checks({"shape": {"tokens": 2, "d": 7, "dtype": "float32"},
                                             "scale": 1.0, "reason": "odd row length"}))
            return Reply(answers.analysis())


def _files_holding(folder: Path, text: bytes) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and text in p.read_bytes()]


def test_a_run_with_llm_lineages_records_tokens_cost_failures_and_the_best(tmp_path,
                                                                           compile_cache,
                                                                           ray_session):
    with LoopbackServer(Model(), api_key=API_KEY) as server:
        server.push(Reply(status=429))
        config = load_config(None, [
            f'run.out_dir="{tmp_path / "runs"}"', "run.name=llm-e2e",
            "search.lineages=2", "search.candidates_per_lineage=2", "search.wall_time_s=600",
            "search.cost_usd=5.0", "search.max_repairs=1",
            f'tracking.mlflow_uri="sqlite:///{tmp_path / "mlflow.db"}"',
            f'evaluator.cache_dir="{compile_cache}"',
            "timing.budget_s=0.05", "timing.min_repeats=5", "timing.max_repeats=30",
            "agent.kind=llm", "agent.backoff_s=0.01",
            f'agent.llm={{model="{MODEL}", base_url="{server.url}", api_key_env="{KEY_ENV}", '
            f'timeout_s=20}}',
            f'agent.prices={{"{MODEL}"={{prompt=3.0, completion=15.0}}}}'])
        console = Console(file=io.StringIO(), width=160)
        outcome = run(config, console)
        printed = console.file.getvalue()
        start_id = outcome.result.start.candidate_id
    result = outcome.result
    assert all(not r.error for r in result.lineages), [r.error for r in result.lineages]
    assert not result.sink_errors
    assert server.requests and all(r.authorised for r in server.requests)

    rows = {row["seq"]: row for row in read_evaluations(outcome.run_dir).to_pylist()}
    searched = [r for r in rows.values() if r["lineage"] >= 0]
    assert len(searched) == 4
    statuses = {r["status"] for r in searched}
    assert {"COMPILE_ERROR", "INCORRECT", "OK"} <= statuses
    broken = next(r for r in searched if r["status"] == "COMPILE_ERROR")
    assert "error" in broken["message"] and broken["origin_move"] == "llm:fast-exp"
    wrong = next(r for r in searched if r["status"] == "INCORRECT")
    assert "wrong result on shape" in wrong["message"]
    assert any(r["origin_move"] == "repair" for r in searched)
    for row in searched:  # every candidate here was written by the model
        assert row["origin_model"] == MODEL and row["tokens"] > 0 and row["cost_usd"] > 0

    best, best_eval = result.summary.best
    assert best.origin.model == MODEL and "ks_fast_expf" in best.source
    assert best_eval.speedup > 1.0
    assert outcome.best_path.read_text() == best.source

    traces = {n: [json.loads(line) for line in
                  (outcome.run_dir / "llm_calls" / f"lineage-{n}.jsonl").read_text().splitlines()]
              for n in (-1, 0, 1)}
    # the tester's start-up request, retried, on the run's own ledger (not lineage 0's)
    assert [c["outcome"] for c in traces[-1]] == ["rate_limited", "ok"]
    assert {c["role"] for c in traces[-1]} == {"tester"}
    assert "tester" not in {c["role"] for c in traces[0] + traces[1]}
    # the starting kernel is analysed once for the run, its answer shared by both lineages
    about_start = [r for r in server.received("analyst") if f"Candidate {start_id} " in r.prompt]
    assert len(about_start) == 1
    # spending per role in summary.json and on the console, as the traces have it
    summary = json.loads((outcome.run_dir / "summary.json").read_text())
    for role in ("planner", "coder", "analyst", "tester"):
        calls = [c for calls in traces.values() for c in calls if c["role"] == role]
        assert summary["llm"]["roles"][role]["cost_usd"] == pytest.approx(
            sum(c["cost_usd"] for c in calls))
        assert summary["llm"]["roles"][role]["tokens"] == sum(
            c["prompt_tokens"] + c["completion_tokens"] for c in calls)
    assert "LLM spending per role" in printed and "planner" in printed
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    parent_id = next(loc for loc in result.locations if "MLflow" in loc).split(", run ")[1][:32]
    logged = read_mlflow_run(uri, parent_id)
    for n in (-1, 0, 1):
        child = logged.lineages[n]
        assert len(child.metrics["llm_latency_s"]) == len(traces[n])
        if n >= 0:
            assert sum(v for _, v in child.metrics["tokens"]) > 0
        assert any(a.startswith("llm_calls/00000-") for a in child.artifacts)
        role = "coder" if n >= 0 else "tester"  # the start run holds the tester's request
        role_tokens = sum(c["prompt_tokens"] + c["completion_tokens"]
                          for c in traces[n] if c["role"] == role)
        assert child.metrics[f"llm.{role}.prompt_tokens"][0][1] + \
            child.metrics[f"llm.{role}.completion_tokens"][0][1] == role_tokens
    total_cost = sum(c["cost_usd"] for calls in traces.values() for c in calls)
    assert logged.parent.metrics["llm.cost_usd"][0][1] == pytest.approx(total_cost)
    assert logged.parent.params["agent.llm"].count(KEY_ENV) == 1

    secret = API_KEY.encode()
    assert not _files_holding(tmp_path, secret)  # run folder, Parquet, MLflow store, artifacts
    assert API_KEY not in json.dumps(logged.parent.params)
