"""End to end: a tiny run through real Ray, g++, the sandbox, SQLite MLflow and Parquet."""

from __future__ import annotations

import io
import json
import math
import sys
import time
from pathlib import Path

import pytest
import ray
import ray.cloudpickle
from mlflow.tracking import MlflowClient
from rich.console import Console

from kernelswarm.agents import builtin_roles
from kernelswarm.experiments.config import load_config, load_run_config
from kernelswarm.experiments.run.execute import run
from kernelswarm.experiments.sinks import read_evaluations, read_mlflow_run
from kernelswarm.experiments.sinks.sources import read_kernel_file
from kernelswarm.search import Coder, Origin, Plan, Roles

pytestmark = pytest.mark.slow


def _config(tmp_path: Path, compile_cache: Path, *extra: str):
    return load_config(None, [
        f'run.out_dir="{tmp_path / "runs"}"', "run.name=e2e",
        "search.lineages=2", "search.candidates_per_lineage=4", "search.wall_time_s=600",
        f'tracking.mlflow_uri="sqlite:///{tmp_path / "mlflow.db"}"',
        f'evaluator.cache_dir="{compile_cache}"',
        "timing.budget_s=0.05", "timing.min_repeats=5", "timing.max_repeats=30",
        *extra])


def _quiet() -> Console:
    return Console(file=io.StringIO(), width=160)


def test_a_run_records_the_same_evaluations_in_parquet_and_mlflow(tmp_path, compile_cache,
                                                                   ray_session):
    console = _quiet()
    outcome = run(_config(tmp_path, compile_cache), console)
    result = outcome.result
    assert not result.sink_errors
    assert all(not r.error for r in result.lineages), [r.error for r in result.lineages]

    table = read_evaluations(outcome.run_dir).to_pylist()
    records = {}
    for row in table:
        records.setdefault(row["seq"], row)
    # every evaluation of both lineages, plus the starting kernel's
    assert len(records) == result.summary.records
    assert {r["lineage"] for r in records.values()} == {-1, 0, 1}
    assert sum(1 for r in records.values() if r["lineage"] >= 0) == 2 * 4

    best_candidate, best_eval = result.summary.best
    assert best_eval.speedup > 1.0  # the built-in agent finds a measured speedup
    best_rows = [r for r in table if r["candidate_id"] == best_candidate.id]
    assert best_rows and all(r["status"] == "OK" for r in best_rows)
    # the best is reported as judged again after the search: the median of its repeats; the
    # figure the search found it at is the one in Parquet
    confirmation = result.confirmation
    assert confirmation is not None and confirmation.chosen is not None
    chosen = confirmation.chosen
    assert chosen.candidate.id == best_candidate.id
    assert best_eval.speedup == pytest.approx(chosen.median.speedup)
    assert len(chosen.repeats) == 3 and min(chosen.spread()) <= best_eval.speedup
    found = [r["candidate_speedup"] for r in records.values()
             if r["candidate_id"] == best_candidate.id]
    assert chosen.found.speedup == pytest.approx(found[0])
    # the confirmed kernels are the search's fastest (the starting kernel is never among them)
    searched = {r["candidate_id"]: r["candidate_speedup"] for r in records.values()
                if r["status"] == "OK" and r["candidate_id"] != result.start.candidate_id}
    top = sorted(searched.values(), reverse=True)[:2]
    assert sorted((k.found.speedup for k in confirmation.kernels), reverse=True) == \
        pytest.approx(top)

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    tagged = client.search_runs([client.get_experiment_by_name("e2e").experiment_id],
                                filter_string=f"tags.run_id = '{outcome.run_dir.name}'")
    parents = [r for r in tagged if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1 and len(tagged) == 1 + 3  # the start's run and two lineages
    parent = parents[0]
    logged_search = read_mlflow_run(uri, parent.info.run_id)
    assert parent.info.status == "FINISHED"
    best_artifacts = [a for a in logged_search.parent.artifacts if a.startswith("best/")]
    assert best_artifacts == [f"best/{best_candidate.id}.cpp.txt"]  # MLflow previews .txt
    for lineage in (0, 1):
        mine = sorted((r for r in records.values() if r["lineage"] == lineage),
                      key=lambda r: r["step"])
        logged = logged_search.lineages[lineage].metrics["candidate_speedup"]
        assert [(r["step"], r["candidate_speedup"]) for r in mine] == [
            (step, pytest.approx(value)) for step, value in logged]
    summary = json.loads((outcome.run_dir / "summary.json").read_text())
    assert summary["best"]["candidate_id"] == best_candidate.id
    knobs, source = read_kernel_file(Path(summary["best"]["file"]).read_text(), "cpp",
                                     best_candidate.entry)
    assert source == best_candidate.source  # the file is the judged kernel, knob header aside
    assert (knobs or {}) == best_candidate.knob_values
    text = console.file.getvalue()
    assert "best vs start" in text and str(outcome.run_dir) in text


_SEGFAULT = """
#include <stdint.h>
extern "C" void silu_and_mul(float* out, const float* x, int64_t tokens, int64_t d) {
    volatile float* p = nullptr;
    *p = x[0];
}
"""
_HANG = """
#include <stdint.h>
extern "C" void silu_and_mul(float* out, const float* x, int64_t tokens, int64_t d) {
    volatile int64_t i = 0;
    while (true) { i = i + 1; }
}
"""


class _HostileFirst(Coder):
    """Proposes a crashing and then a hanging kernel before handing over to the real coder."""

    def __init__(self, inner: Coder) -> None:
        self.inner = inner
        self.queue = [_SEGFAULT, _HANG]

    def code(self, plan: Plan, parent, view):
        if self.queue:
            return parent.derive(source=self.queue.pop(0), origin=Origin(role="coder", move=plan.move))
        return self.inner.code(plan, parent, view)


# Ray workers cannot import this test module: ship the roles factory's code with it.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class _BuggyCoder(Coder):
    def code(self, plan, parent, view):
        raise RuntimeError("bug in a coder")


def _hostile_roles(seed: int) -> Roles:
    roles = builtin_roles(seed)
    coder = _HostileFirst(roles.coder) if seed % 1000 == 0 else _BuggyCoder()
    return Roles(roles.planner, coder, roles.analyst)


def test_crashing_hanging_kernels_and_a_crashing_lineage_leave_the_run_complete(
        tmp_path, compile_cache, ray_session):
    config = _config(tmp_path, compile_cache, "search.lineages=2",
                     "search.candidates_per_lineage=4", "evaluator.run_timeout_s=4")
    outcome = run(config, _quiet(), make_roles=_hostile_roles)
    rows = read_evaluations(outcome.run_dir).to_pylist()
    by_status = {}
    for row in rows:
        if row["lineage"] == 0:
            by_status.setdefault(row["status"], []).append(row)
    assert "SIGSEGV" in by_status["RUNTIME_ERROR"][0]["message"]
    assert "TIMEOUT" in by_status and "4" in by_status["TIMEOUT"][0]["message"]
    steps = {row["step"] for row in rows if row["lineage"] == 0}
    assert steps == {1, 2, 3, 4}  # the lineage went on after both
    assert outcome.result.summary.best is not None
    assert not math.isnan(outcome.result.summary.best[1].speedup)
    crashed = [r for r in outcome.result.lineages if r.error]
    assert [r.lineage for r in crashed] == [1] and "bug in a coder" in crashed[0].error


def test_resume_continues_a_run_without_re_evaluating(tmp_path, compile_cache, ray_session):
    clock = time.monotonic()
    first = run(_config(tmp_path, compile_cache, "search.candidates_per_lineage=2",
                        "search.wall_time_s=600"), _quiet())
    first_s = time.monotonic() - clock
    first_wall = json.loads((first.run_dir / "summary.json").read_text())["wall_s"]
    # summary.json's wall time is the run's, start-up included (only the report comes after)
    assert 0.6 * first_s <= first_wall <= first_s
    before = {p.name: p.read_bytes() for p in (first.run_dir / "evaluations").glob("*.parquet")}
    first_steps = {r.lineage: r.steps for r in first.result.lineages}
    config = load_run_config(first.run_dir, ["search.candidates_per_lineage=4"])
    clock = time.monotonic()
    second = run(config, _quiet(), resume=first.run_dir)
    second_s = time.monotonic() - clock
    whole = json.loads((first.run_dir / "summary.json").read_text())["wall_s"]
    assert first_wall + 0.6 * second_s <= whole <= first_wall + second_s  # both sessions
    assert second.run_dir == first.run_dir
    for name, data in before.items():  # nothing recorded was touched
        assert (first.run_dir / "evaluations" / name).read_bytes() == data
    records = {}
    for row in read_evaluations(first.run_dir).to_pylist():
        records.setdefault(row["seq"], row)
    assert sorted(records) == list(range(len(records)))  # seq continues, no gap, no overlap
    assert len(records) > len(before)
    assert sum(1 for r in records.values() if r["lineage"] == -1) == 1  # start not re-timed
    for lineage in (0, 1):
        steps = sorted(r["step"] for r in records.values() if r["lineage"] == lineage)
        # the lineage's steps go on from where it stopped, within the larger budget
        assert steps == list(range(1, len(steps) + 1)) and len(steps) <= 4
        assert steps[:first_steps[lineage]] == list(range(1, first_steps[lineage] + 1))
    resumed = {r.lineage: r.steps for r in second.result.lineages}
    assert any(resumed[i] > first_steps[i] for i in (0, 1))
    # a kernel's verdict is measured once: a repeat is the recorded verdict, not a new timing
    timings = {}
    for r in records.values():
        timings.setdefault(r["candidate_id"], set()).add(r["eval_s"])
    assert all(len(values) == 1 for values in timings.values())
    # MLflow: the resumed run goes on in its one parent run, its changed budget a tag
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("e2e").experiment_id
    runs = client.search_runs([experiment], filter_string=f"tags.run_id = '{first.run_dir.name}'")
    parents = [r for r in runs if "lineage" not in r.data.tags]
    assert second.result.sink_errors == []
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert parents[0].data.tags["resumed.search.candidates_per_lineage"] == "4"
    assert parents[0].data.params["search.candidates_per_lineage"] == "2"
    lineages = [r.data.tags["lineage"] for r in runs if "lineage" in r.data.tags]
    assert sorted(lineages) == sorted(set(lineages))  # one run per lineage, not one per session
