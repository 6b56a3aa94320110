"""Every figure of a real CPU run as a user reads it in the console, summary.json, the report and
MLflow: the same figure under the same name, or a word on why it differs (baseline times carried
over from their measurement), and never a figure for what was not measured."""

from __future__ import annotations

import json
import math

import pytest

from kernelswarm.experiments.report.writer import write_report
from kernelswarm.experiments.sinks import read_mlflow_run
from kernelswarm.experiments.sinks.mlflow_runs import find_parent_run

pytestmark = pytest.mark.slow


def _summary(outcome) -> dict:
    return json.loads((outcome.run_dir / "summary.json").read_text())


def test_a_baseline_that_was_not_measured_has_no_figure_in_summary_json(small_run):
    outcome, _, _ = small_run
    best = _summary(outcome)["best"]
    # torch.compile is not measured on the CPU (the tests leave it out everywhere)
    assert all(shape["compile_time_us"] is None for shape in best["shapes"])
    assert best["speedup_vs_compile"] is None  # null, not a 0.0x a script would average in
    assert best["speedup_vs_eager"] > 0


def test_mlflow_names_each_wall_time_as_summary_json_does(small_run):
    outcome, _, uri = small_run
    summary = _summary(outcome)
    assert summary["wall_s"] > summary["search_wall_s"] > 0  # the run's includes Ray's start
    # the start-up (Ray, calibration, the starting kernel's verdict) is part of the run's time
    assert 0 < summary["startup_s"] < summary["wall_s"]
    parent = read_mlflow_run(uri, find_parent_run(uri, "small", outcome.run_dir.name)[0]).parent
    metrics = {key: history[-1][1] for key, history in parent.metrics.items()}
    assert metrics["search_wall_s"] == pytest.approx(summary["search_wall_s"])
    assert metrics["wall_s"] == pytest.approx(summary["wall_s"])
    assert metrics["startup_s"] == pytest.approx(summary["startup_s"])
    assert parent.tags["best_confirmed"] == str(summary["best"]["confirmed"]).lower()


def test_the_reports_best_kernel_table_names_each_figure_once(small_run):
    outcome, _, _ = small_run
    markdown = write_report(outcome.run_dir).markdown.read_text()
    lines = markdown.splitlines()
    header = lines[lines.index("## Best kernel") + 2]
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert len(columns) == len(set(columns)), columns  # one "vs eager", not two
    assert "vs compile" not in columns  # not measured: no column of dashes
    summary = _summary(outcome)
    row = lines[lines.index(header) + 2]
    figures = "confirmed" if summary["best"]["confirmed"] else "unconfirmed"
    assert row.split("|")[columns.index("figures") + 1].strip().startswith(figures)


def test_baseline_times_say_they_were_carried_over_from_their_measurement(small_run):
    outcome, console, _ = small_run
    summary = _summary(outcome)
    # summary.json: each shape's eager time is the measured one times its factor, both given
    assert summary["baselines"]["measured_us"] and summary["baselines"]["file"]
    factors = []
    for shape in summary["best"]["shapes"]:
        eager = summary["baselines"]["measured_us"][shape["shape"]]["eager"]
        assert shape["eager_time_us"] == pytest.approx(eager * shape["baseline_scale"])
        factors.append(shape["baseline_scale"])
    # the console says so under the per-shape table, with the same factors
    text = " ".join(console.split())
    assert "baseline times are carried over from their measurement" in text
    assert ", ".join(f"x{f:.2f}" for f in factors) in text
    # the report too: a column of factors and eager's times as measured
    markdown = write_report(outcome.run_dir).markdown.read_text()
    assert "baselines carried ×" in markdown
    eager = [summary["baselines"]["measured_us"][s["shape"]]["eager"]
             for s in summary["best"]["shapes"]]
    assert f"Eager as measured: {', '.join(f'{e:.2f}' for e in eager)} µs" in markdown
    for shape, factor in zip(summary["best"]["shapes"], factors, strict=True):
        row = next(ln for ln in markdown.splitlines() if ln.startswith(f"| {shape['shape']} |"))
        assert f"| {factor:.2f} |" in row
    assert all(math.isfinite(f) and f > 0 for f in factors)
