"""The orchestration benchmark (benchmarks/cluster_scale.py) at a tiny size: its
simulated evaluations all reach Parquet, exactly once, and its figures are sane.

It starts its own multi-node ``ray.cluster_utils`` cluster, so it runs in a subprocess (this
process may already hold the session's Ray instance).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.cluster_sim import SIMULATED_DEVICE
from kernelswarm.experiments.sinks.parquet import read_evaluations

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

GPUS, CANDIDATES, RECORDS = 2, 3, 60


def test_the_benchmark_records_every_simulated_evaluation_once(tmp_path):
    command = [sys.executable, "-m", "benchmarks.cluster_scale",
               "--json", "--gpus", str(GPUS), "--nodes", "1", "--candidates", str(CANDIDATES),
               "--service-s", "0.05", "--compile-s", "0", "--ingest-records", str(RECORDS),
               "--ingest-lineages", "4", "--ingest-in-flight", "8",
               "--ingest-sinks", "parquet+mlflow,floor", "--out", str(tmp_path)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    result = json.loads(proc.stdout)

    [row] = result["rows"]
    # The starting kernel plus every lineage's budget, each executed by a simulated worker
    # once and recorded once.
    assert row["recorded"] == row["executed"] == 1 + row["lineages"] * CANDIDATES
    assert row["lineages"] == GPUS and not row["lineage_errors"]
    table = read_evaluations(tmp_path / "runs" / f"gpus-{GPUS}").to_pylist()
    assert len({r["candidate_id"] for r in table}) == row["recorded"]
    assert {r["device"] for r in table} == {SIMULATED_DEVICE}
    # Records counted in the window; at this size the window is a few service times long, and
    # each simulated GPU may finish one evaluation in it whose service began before it.
    counted = row["throughput"] * row["window_s"]
    assert 0 < counted <= row["ideal"] * row["window_s"] + GPUS + 1e-6
    # Busy time inside the window: at this size the window can fall between two services (a
    # loaded machine stretches the lineages' own steps), so it may be 0, never above one.
    assert 0 <= row["busy"] <= 1.05
    overhead = row["overhead"]
    # Every candidate but each lineage's last has a following step to time its record by.
    assert overhead["candidates"] == row["lineages"] * (CANDIDATES - 1)
    parts = [overhead[k] for k in ("claim_ms", "dispatch_ms", "return_ms", "record_ms")]
    assert all(math.isfinite(p) and p >= 0 for p in parts) and overhead["total_ms"] > 0

    ingest, floor = result["ingest"]
    assert ingest["sinks"] == "parquet+mlflow" and not ingest["sink_errors"]
    assert ingest["parquet_records"] == ingest["mlflow_records"] == RECORDS
    # Records in flight together share a Parquet file (the tracker's group commit).
    assert ingest["parquet_files"] < RECORDS
    assert ingest["acknowledged_per_s"] >= ingest["through_mlflow_per_s"] > 0
    # Each target is judged on the figures above.
    judged = result["targets"]["ingest per s, parquet+mlflow"]
    assert judged["value"] == ingest["through_mlflow_per_s"]
    assert judged["met"] == (judged["value"] >= judged["target"])
    # The same calls to an actor that does nothing with them: measured, never judged.
    assert floor["sinks"] == "floor" and floor["records"] == RECORDS
    assert floor["acknowledged_per_s"] > 0 and floor["parquet_records"] == 0
    assert not any("floor" in name for name in result["targets"])
