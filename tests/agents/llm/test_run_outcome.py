"""A whole ``kernelswarm run`` whose model answers garbage to every request, read as a user reads
it: the console, summary.json and MLflow. Nothing was proposed, so the run failed (exit 1, its
MLflow parent run FAILED saying why); the stop reasons read the same on the console as in
summary.json; the best kernel is the starting kernel, 1.000x over itself everywhere. Real
loopback server, Ray, g++, sandbox, SQLite MLflow; one run for the module's tests."""

from __future__ import annotations

import contextlib
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from kernelswarm.agents.llm import LoopbackServer, Reply, always
from kernelswarm.experiments.commands.cli import main
from kernelswarm.experiments.sinks import read_evaluations, read_mlflow_run
from tests.agents.llm.conftest import API_KEY, KEY_ENV, MODEL

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str  # the console, as printed (80 columns)
    run_dir: Path
    summary: dict
    mlflow_uri: str

    @property
    def flat(self) -> str:
        """The console's text with its wrapping undone."""
        return " ".join(self.out.split())

    def parent(self):
        run_id = re.search(r"run ([0-9a-f]{32})", self.out).group(1)
        return read_mlflow_run(self.mlflow_uri, run_id).parent


@pytest.fixture(scope="module")
def garbage_run(tmp_path_factory, compile_cache, ray_session) -> Outcome:
    root = tmp_path_factory.mktemp("garbage-run")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    with LoopbackServer(always(Reply("Sure, here is a faster kernel!")),
                        api_key=API_KEY) as server:
        for attempt in range(2):  # once more where a loaded machine fails the start's timing
            out_dir = root / f"runs{attempt}"
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                code = main(["run", *[arg for pair in (("--set", s) for s in [
                    f'run.out_dir="{out_dir}"', "run.name=garbage", "search.lineages=2",
                    "search.candidates_per_lineage=2", f'tracking.mlflow_uri="{uri}"',
                    f'evaluator.cache_dir="{compile_cache}"', "timing.budget_s=0.05",
                    "timing.min_repeats=5", "timing.max_repeats=30", "agent.kind=llm",
                    "agent.backoff_s=0.01", f"agent.llm.model={MODEL}",
                    f"agent.llm.base_url={server.url}", f'agent.llm.api_key_env="{KEY_ENV}"',
                    "agent.llm.max_retries=1", "search.wall_time_s=120"]) for arg in pair]])
            out = printed.getvalue()
            if "the starting kernel fails evaluation" not in out:
                break
    run_dir, = out_dir.iterdir()
    return Outcome(code, out, run_dir, json.loads((run_dir / "summary.json").read_text()), uri)


def test_a_run_that_proposed_nothing_is_failed_in_mlflow_saying_why(garbage_run):
    last = garbage_run.out.strip().splitlines()[-1]
    assert garbage_run.code == 1 and last.startswith("error: no lineage proposed a candidate: ")
    parent = garbage_run.parent()
    assert parent.status == "FAILED"
    assert parent.tags["failure"].startswith("no lineage proposed a candidate: planner stopped: "
                                             "planner: 3 malformed answers in a row")


def test_the_console_quotes_stop_reasons_as_summary_json_has_them(garbage_run):
    reasons = [" ".join(lineage["stop_reason"].split())
               for lineage in garbage_run.summary["lineages"]]
    assert all("there is no ```json block" in reason for reason in reasons), reasons
    for number, reason in enumerate(reasons):
        assert f"lineage {number} stopped: {reason}" in garbage_run.flat
    last = garbage_run.out.strip().splitlines()[-1]
    assert f"error: no lineage proposed a candidate: {reasons[0]}" == " ".join(last.split())


def test_the_starting_kernel_is_1x_over_itself_in_the_console_summary_and_mlflow(garbage_run):
    summary = garbage_run.summary
    rows = read_evaluations(garbage_run.run_dir).to_pylist()
    start = {row["candidate_id"] for row in rows if row["lineage"] < 0}
    best = summary["best"]
    assert best["candidate_id"] in start  # nothing else was proposed
    assert best["speedup_vs_start"] == 1.0
    assert all(row["speedup_vs_start"] == 1.0 for row in rows if row["lineage"] < 0)
    overall = next(line for line in garbage_run.out.splitlines() if "overall = start" in line)
    assert re.search(r"│ 1\.000x\s+│", overall), overall  # no spread, no gain, no ≈
    assert garbage_run.parent().metrics["best_speedup"][-1][1] == 1.0
