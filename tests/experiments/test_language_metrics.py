"""A run of several languages logs each language's best to its MLflow parent run (a real MLflow
store on SQLite), beside the overall best the tracker's sink logs."""

from __future__ import annotations

from kernelswarm.experiments.report.writer import log_language_bests
from kernelswarm.experiments.sinks.mlflow_store import mlflow_client


def _summary(triton_best: dict | None) -> dict:
    cpp = {"reference": True, "best": {"speedup_vs_start": 1.25, "speedup_vs_reference": 1.25}}
    return {"languages": {"cpp": cpp, "triton": {"reference": False, "best": triton_best}}}


def test_each_languages_best_is_a_metric_of_the_parent_run(tmp_path):
    client = mlflow_client(f"sqlite:///{tmp_path}/mlflow.db")
    experiment = client.create_experiment("languages")
    run_id = client.create_run(experiment).info.run_id

    logged = log_language_bests(client, run_id, _summary(
        {"speedup_vs_start": 3.0, "speedup_vs_reference": 0.75}))
    metrics = client.get_run(run_id).data.metrics
    assert sorted(logged) == sorted(metrics)
    assert metrics == {"best_speedup.cpp": 1.25, "best_speedup_vs_reference.cpp": 1.25,
                       "best_speedup.triton": 3.0, "best_speedup_vs_reference.triton": 0.75}


def test_a_language_without_a_best_and_a_one_language_run_log_nothing_for_it(tmp_path):
    client = mlflow_client(f"sqlite:///{tmp_path}/mlflow.db")
    run_id = client.create_run(client.create_experiment("one")).info.run_id
    assert log_language_bests(client, run_id, _summary(None)) == [
        "best_speedup.cpp", "best_speedup_vs_reference.cpp"]
    one = {"languages": {"cpp": _summary(None)["languages"]["cpp"]}}
    assert log_language_bests(client, run_id, one) == []
