"""A run as MLflow's UI shows it, read back from a real SQLite store: names, tags, previewable
sources, profile constants as params, the per-shape table and the report."""

from __future__ import annotations

import json

import pytest

from kernelswarm.experiments.sinks import read_mlflow_run
from kernelswarm.experiments.sinks.mlflow_layout import SteadyMetrics, previewable
from kernelswarm.experiments.sinks.mlflow_runs import find_parent_run, read_artifact_text

pytestmark = pytest.mark.slow


def test_runs_are_named_and_tagged_and_their_sources_preview(small_run):
    outcome, _, uri = small_run
    found = find_parent_run(uri, "small", outcome.run_dir.name)
    assert found is not None
    logged = read_mlflow_run(uri, found[0])
    parent = logged.parent
    assert parent.name == "silu_and_mul cpp · builtin · 2x3 · cpu"
    for run in (parent, *logged.lineages.values()):
        assert {k: run.tags[k] for k in ("task", "language", "agent", "device")} == {
            "task": "silu_and_mul", "language": "cpp", "agent": "builtin", "device": "cpu"}
    best = outcome.result.summary.best[0]
    assert f"best/{best.id}.cpp.txt" in parent.artifacts
    assert not [a for a in parent.artifacts if a.endswith(".cpp")]
    for plot in ("report.html", "best_over_time.svg", "shape_times.svg", "roofline.svg"):
        assert f"report/{plot}" in parent.artifacts
    description = parent.tags["mlflow.note.content"]  # the run page's "Description"
    assert description.startswith(f"**silu_and_mul**: best kernel `{best.id}` (cpp), ")
    reported = json.loads((outcome.run_dir / "summary.json").read_text())["best"]
    assert f"{reported['speedup_vs_start']:.3f}x vs the starting kernel" in description
    table = json.loads(read_artifact_text(uri, found[0], "best_shapes.json"))
    shapes = {row[table["columns"].index("shape")] for row in table["data"]}
    assert shapes == {s.shape for s in outcome.result.summary.best[1].shapes}


def test_profile_figures_that_never_change_are_params_not_metrics(small_run):
    outcome, _, uri = small_run
    logged = read_mlflow_run(uri, find_parent_run(uri, "small", outcome.run_dir.name)[0])
    lineage = logged.lineages[0]
    constant = [k for k in lineage.params if k.startswith(("profile.", "resource."))]
    assert constant  # e.g. the machine's figures and the timing settings
    assert not set(constant) & set(lineage.metrics)
    for key, history in lineage.metrics.items():
        if key.startswith(("profile.", "resource.")):
            assert len({value for _, value in history}) > 1, key  # only what moves
    # the built-in agent spends nothing: no chart of zeros, a param saying so
    assert "tokens" not in lineage.metrics and "cost_usd" not in lineage.metrics
    assert float(lineage.params["tokens"]) == 0.0


def test_held_figures_are_released_with_their_first_point_when_they_change():
    steady = SteadyMetrics()
    assert steady.observe({"profile.x": 1.0, "candidate_speedup": 2.0}, 10, 0) == [
        ("candidate_speedup", 2.0, 10, 0)]
    assert steady.observe({"profile.x": 1.0}, 20, 1) == []
    assert steady.observe({"profile.x": 3.0}, 30, 2) == [("profile.x", 1.0, 10, 0),
                                                         ("profile.x", 3.0, 30, 2)]
    assert steady.observe({"profile.x": 3.0, "profile.y": 5.0}, 40, 3) == [
        ("profile.x", 3.0, 40, 3)]
    assert steady.constants() == {"profile.y": 5.0}
    assert previewable("best/a.cpp") == "best/a.cpp.txt" and previewable("b/k.py") == "b/k.py"
