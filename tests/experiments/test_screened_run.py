"""A run with screening on (search.screen_shapes), end to end through real Ray, g++, the sandbox,
Parquet and MLflow: a kernel slower than the lineage's best is screened out on its screening
shape, recorded as SCREENED_OUT, counted in summary.json, MLflow and the report, and never the
best; the search goes on after it."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest
import ray.cloudpickle
from mlflow.tracking import MlflowClient
from rich.console import Console

from kernelswarm.agents import builtin_roles
from kernelswarm.experiments.config import load_config
from kernelswarm.experiments.report.writer import write_report
from kernelswarm.experiments.run.execute import run
from kernelswarm.experiments.sinks import read_evaluations
from kernelswarm.search import Coder, Origin, Plan, Roles

pytestmark = pytest.mark.slow


class _SlowFirst(Coder):
    """Proposes the lineage's kernel doing every row twice (correct, about half as fast), then
    hands over to the built-in coder."""

    def __init__(self, inner: Coder) -> None:
        self.inner, self.done = inner, False

    def code(self, plan: Plan, parent, view):
        if self.done:
            return self.inner.code(plan, parent, view)
        self.done = True
        source = re.sub(r"(extern \"C\" void silu_and_mul\([^)]*\) \{)",
                        r"\1\n    for (int rep = 0; rep < 2; ++rep)", parent.source, count=1)
        return parent.derive(source=source, origin=Origin(role="coder", move=plan.move))


ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _roles(seed: int) -> Roles:
    roles = builtin_roles(seed)
    return Roles(roles.planner, _SlowFirst(roles.coder), roles.analyst)


def test_a_screened_run_records_counts_and_reports_what_it_screened_out(tmp_path: Path,
                                                                          compile_cache,
                                                                          ray_session):
    config = load_config(None, [
        f'run.out_dir="{tmp_path / "runs"}"', "run.name=screened",
        "search.lineages=1", "search.candidates_per_lineage=4", "search.wall_time_s=600",
        "search.screen_shapes=1", "search.confirm_top=0",
        f'tracking.mlflow_uri="sqlite:///{tmp_path / "mlflow.db"}"',
        f'evaluator.cache_dir="{compile_cache}"',
        "timing.budget_s=0.05", "timing.min_repeats=5", "timing.max_repeats=30"])
    outcome = run(config, Console(file=io.StringIO(), width=160), make_roles=_roles)
    rows = read_evaluations(outcome.run_dir).to_pylist()
    verdicts = {}
    for row in rows:
        verdicts.setdefault(row["seq"], row)
    screened = [r for r in verdicts.values() if r["status"] == "SCREENED_OUT"]
    assert screened, sorted((r["step"], r["status"]) for r in verdicts.values())
    assert screened[0]["step"] == 1 and screened[0]["message"].startswith("screened out")
    timed = [r for r in rows if r["seq"] == screened[0]["seq"] and r["time_us"] == r["time_us"]]
    assert len(timed) == 1  # its screening shape only
    assert sum(r["lineage"] == 0 for r in verdicts.values()) == 4  # the search went on

    summary = json.loads((outcome.run_dir / "summary.json").read_text())
    assert summary["screening"]["screened_out"] == len(screened)
    assert summary["screening"]["saved_s"] > 0
    best = outcome.result.summary.best
    assert best is not None and best[1].ok
    assert best[0].id not in {r["candidate_id"] for r in screened}
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    tagged = client.search_runs([client.get_experiment_by_name("screened").experiment_id],
                                filter_string=f"tags.run_id = '{outcome.run_dir.name}'")
    parent = next(r for r in tagged if "mlflow.parentRunId" not in r.data.tags)
    assert parent.data.metrics["screened_out"] == len(screened)
    assert parent.data.metrics["screen_saved_s"] == pytest.approx(summary["screening"]["saved_s"])

    text = write_report(outcome.run_dir).markdown.read_text()
    assert f"{len(screened)} candidates were screened out" in text
