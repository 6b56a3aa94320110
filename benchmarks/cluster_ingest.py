"""The tracker's ingest rate with the Parquet and MLflow sinks on: records per second that one
``TrackerActor`` takes while many lineages record at once (part of ``cluster_scale``).

The records are simulated verdicts (``cluster_sim``) on distinct candidates, ``lineages`` child
runs' worth; ``in_flight`` record calls are outstanding at any time, as if that many lineages
were each waiting for their record. Two rates: acknowledged (every record in Parquet, synced:
what a lineage waits for) and through MLflow (until the tracker has closed, the background
MLflow sink caught up). Afterwards Parquet's rows and MLflow's points are counted against the
records sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from benchmarks.cluster_sim import SIMULATED_MOVE, Simulation, simulated_start, simulated_verdict
from kernelswarm.cluster.ingest import feed_floor, feed_tracker
from kernelswarm.experiments.sinks.mlflow_runs import find_parent_run
from kernelswarm.experiments.sinks.mlflow_sink import MLflowSink
from kernelswarm.experiments.sinks.mlflow_store import mlflow_client
from kernelswarm.experiments.sinks.parquet import EVALUATIONS, ParquetSink, read_evaluations
from kernelswarm.search import Candidate, Evaluation, Origin, RunInfo

EXPERIMENT = "cluster-scale"
FLOOR = "floor"  # an ingest row of the calls alone (no tracker behind them)


@dataclass(frozen=True)
class IngestRow:
    """One feeding of the tracker and what its sinks hold afterwards."""

    sinks: str  # "parquet", "parquet+mlflow", or "floor" (the calls alone: ``measure_floor``)
    records: int
    lineages: int
    in_flight: int
    acknowledged_per_s: float  # Parquet written and synced for every record
    through_mlflow_per_s: float  # until the tracker closed: MLflow caught up too
    tracker_cpu_ms: float  # the tracker process's CPU per record, all sinks included
    parquet_records: int  # distinct records in the Parquet table
    parquet_files: int  # one per batch the tracker wrote together
    mlflow_records: int  # points of the parent run's global_best (one per record; 0 without)
    sink_errors: tuple[str, ...]


def ingest_records(count: int, lineages: int, simulation: Simulation
                   ) -> list[tuple[int, int, Candidate, Evaluation]]:
    """``count`` distinct candidates with simulated verdicts, round-robin over ``lineages``."""
    start = simulated_start()
    items = []
    for i in range(count):
        lineage, step = i % lineages, i // lineages
        candidate = start.derive(source=f"{start.source}// ingest {lineage}.{step}\n",
                                 lineage=lineage,
                                 origin=Origin(role="coder", move=SIMULATED_MOVE))
        items.append((lineage, step, candidate, simulated_verdict(candidate, simulation)))
    return items


def measure_ingest(records: int, lineages: int, in_flight: int, out: Path,
                   mlflow: bool = True) -> IngestRow:
    """Feed one tracker (Parquet, and MLflow unless ``mlflow`` is False, under ``out``) and
    count what its sinks hold."""
    name = "ingest-mlflow" if mlflow else "ingest-parquet"
    run_dir = out / "runs" / name
    uri = f"sqlite:///{out}/mlflow.db"
    run = RunInfo(run_id=name, name=name, run_dir=run_dir, task="simulated",
                  language="cpp", lineages=lineages, params={"simulated.records": records})
    items = ingest_records(records, lineages, Simulation(out / "trace" / name))
    sinks = [ParquetSink(), *([MLflowSink(uri, EXPERIMENT)] if mlflow else [])]
    fed = feed_tracker(run, sinks, items, in_flight)
    table = read_evaluations(run_dir)
    found = find_parent_run(uri, EXPERIMENT, run.run_id) if mlflow else None
    points = (len(mlflow_client(uri).get_metric_history(found[0], "global_best"))
              if found else 0)
    return IngestRow(
        sinks="parquet+mlflow" if mlflow else "parquet", records=records, lineages=lineages, in_flight=in_flight,
        acknowledged_per_s=records / fed.acknowledged_s,
        through_mlflow_per_s=records / fed.closed_s,
        tracker_cpu_ms=fed.tracker_cpu_s / records * 1000,
        parquet_records=len(set(table.column("seq").to_pylist())),
        parquet_files=len(list((run_dir / EVALUATIONS).glob("part-*.parquet"))),
        mlflow_records=points, sink_errors=fed.sink_errors)


def measure_floor(records: int, lineages: int, in_flight: int, out: Path) -> IngestRow:
    """The same calls, sent the same way, to an actor that does nothing with them: the most
    records per second any tracker could take on this machine (``cluster.ingest.CallFloor``)."""
    items = ingest_records(records, lineages, Simulation(out / "trace" / "ingest-floor"))
    fed = feed_floor(items, in_flight)
    return IngestRow(
        sinks=FLOOR, records=records, lineages=lineages, in_flight=in_flight,
        acknowledged_per_s=records / fed.acknowledged_s,
        through_mlflow_per_s=records / fed.closed_s,
        tracker_cpu_ms=fed.tracker_cpu_s / records * 1000, parquet_records=0, parquet_files=0,
        mlflow_records=0, sink_errors=fed.sink_errors)
