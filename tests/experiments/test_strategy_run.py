"""A real run's strategy figures (the shared small run searches with MAP-Elites and novelty
rejection): summary.json, the run folder's rejections log, MLflow and the status line agree."""

from __future__ import annotations

import json

import pytest

from kernelswarm.cluster.tracker_actor import REJECTIONS_LOG
from kernelswarm.experiments.sinks import read_mlflow_run
from kernelswarm.experiments.sinks.mlflow_runs import find_parent_run
from kernelswarm.experiments.views.progress import _status_line


@pytest.mark.slow
def test_the_run_reports_its_strategy_and_what_novelty_rejected(small_run):
    outcome, _, uri = small_run
    summary = json.loads((outcome.run_dir / "summary.json").read_text())
    assert summary["strategy"] == "map_elites"
    population = summary["population"]
    assert population["strategy"] == "map_elites"
    # Every correct kernel lands in a cell, and the cells hold what the strategy kept.
    assert population["cells"] == population["kept"] >= 1
    assert 1 <= population["kept_families"] <= population["kept"]
    log = outcome.run_dir / REJECTIONS_LOG
    rejections = log.read_text().splitlines() if log.exists() else []
    assert summary["novelty_rejected"] == population["rejected"] == len(rejections)
    parent = read_mlflow_run(uri, find_parent_run(uri, "small", outcome.run_dir.name)[0]).parent
    assert [value for _, value in parent.metrics["novelty_rejected"]] == [len(rejections)]


def test_the_status_line_counts_rejections_beside_the_verdicts_only_when_there_are_some():
    stats = {"records": 5, "status": {"OK": 5}, "best": 1.5,
             "population": {"strategy": "map_elites", "cells": 4, "rejected": 0}}
    assert "[OK 5]" in _status_line(stats, 1.0)
    stats["population"]["rejected"] = 2
    line = _status_line(stats, 1.0)
    assert "[NOT_NOVEL 2, OK 5]" in line and len(line) <= 80
