"""How far the orchestration scales, without a GPU:
``python -m benchmarks.cluster_scale``.

A SIMULATION (``cluster_sim``): evaluation workers hold a fake GPU (the Ray custom resource
``sim_gpu``) and sleep a fixed service time per candidate instead of judging it; compiles are a
shorter sleep on the lineage's CPU; the roles propose a new variant every step. Everything else
is the real thing: ``Swarm`` with its ``TrackerActor`` (Parquet and MLflow sinks on), its
``EvalDispatcher`` and ``EvalWorker``s, and one ``LineageActor`` per lineage driving the search's
``Driver`` (claim, compile, dispatch, record), on a ``ray.cluster_utils`` cluster of several
nodes on this machine. The figures say what orchestration costs, not what a GPU does.

Reported:

- throughput for each number of simulated GPUs (default 1, 2, 4, 8): evaluations per second
  while every lineage is running (from the first moment all have recorded one evaluation to the
  first moment one has finished), against linear scaling from one GPU and against the ideal
  (GPUs / service time);
- per-candidate orchestration overhead, the median over candidates: claim (coded → compile
  starts), dispatch (compiled → a worker starts it), return (worker done → the lineage has the
  verdict), record (verdict → the next step begins: the record sent, made durable while the
  next step runs, and on migration steps the migrant query);
- the tracker's ingest rate (``cluster_ingest``): records per second a ``TrackerActor`` with
  Parquet and MLflow takes when many lineages record at once, and beside it the same calls to
  an actor that does nothing with them (what the calls alone cost on this machine).

Each run's Parquet table is counted against the evaluations the simulated workers executed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

from benchmarks.cluster_ingest import FLOOR, IngestRow, measure_floor, measure_ingest
from benchmarks.cluster_sim import (
    ANALYSED,
    CODED,
    COMPILED,
    PLANNED,
    SERVED,
    SimulatedEvaluator,
    Simulation,
    read_trace,
    simulated_roles,
    simulated_start,
)
from kernelswarm.cluster import Swarm, SwarmSpec
from kernelswarm.cluster.local_cluster import LocalCluster, NodeSpec
from kernelswarm.experiments.sinks.mlflow_sink import MLflowSink
from kernelswarm.experiments.sinks.parquet import ParquetSink, read_evaluations
from kernelswarm.search import Budget, RunInfo

SIM_GPU = "sim_gpu"  # the Ray custom resource a simulated GPU is
THROUGHPUT_TARGET = 0.90  # of linear scaling
OVERHEAD_TARGET_MS = 20.0
INGEST_TARGET = 2000.0  # records per second: about 1,000 GPUs at 2 evaluations per second
INGEST_SINKS = ("parquet", "parquet+mlflow", FLOOR)  # FLOOR: the calls alone, no tracker


@dataclass(frozen=True)
class Overhead:
    """Medians over candidates, milliseconds (see the module docstring for each part)."""

    candidates: int
    claim_ms: float
    dispatch_ms: float
    return_ms: float
    record_ms: float
    total_ms: float


@dataclass(frozen=True)
class ScaleRow:
    """One run on ``gpus`` simulated GPUs."""

    gpus: int
    lineages: int
    recorded: int  # evaluations in the run's Parquet table (the starting kernel's included)
    executed: int  # evaluations the simulated workers executed
    window_s: float  # the span while every lineage ran (see ``steady``)
    steady: bool  # False: the lineages never all ran at once; the window is the whole run
    throughput: float  # evaluations per second in that span
    ideal: float  # gpus / service time
    busy: float  # fraction of the simulated GPUs' time spent serving in that span
    overhead: Overhead
    lineage_errors: tuple[str, ...]


def _median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000 if values else float("nan")


def overhead(trace_dir: Path) -> Overhead:
    """Per-candidate orchestration time from the simulated pieces' trace (module docstring)."""
    coded, compiled, served, analysed, planned = {}, {}, {}, {}, {}
    for event in read_trace(trace_dir):
        kind = event[0]
        if kind == CODED:
            coded[event[1]] = (event[2], event[3], event[4])  # lineage, step, time
        elif kind == COMPILED:
            compiled[event[1]] = (event[2], event[3])
        elif kind == SERVED:
            served[event[1]] = (event[2], event[3])
        elif kind == ANALYSED:
            analysed[event[1]] = event[2]
        elif kind == PLANNED:
            planned[(event[1], event[2])] = event[3]
    parts: dict[str, list[float]] = {"claim": [], "dispatch": [], "return": [], "record": []}
    for cid, (lineage, step, at) in coded.items():
        following = planned.get((lineage, step + 1))  # none after a lineage's last step
        if cid not in compiled or cid not in served or cid not in analysed or following is None:
            continue
        parts["claim"].append(compiled[cid][0] - at)
        parts["dispatch"].append(served[cid][0] - compiled[cid][1])
        parts["return"].append(analysed[cid] - served[cid][1])
        parts["record"].append(following - analysed[cid])
    totals = [sum(values) for values in zip(*parts.values(), strict=True)]
    return Overhead(len(totals), _median_ms(parts["claim"]), _median_ms(parts["dispatch"]),
                    _median_ms(parts["return"]), _median_ms(parts["record"]), _median_ms(totals))


def _window(lineages: dict[int, list[float]]) -> tuple[float, float, bool]:
    """From when every lineage has recorded once to when the first one recorded its last; in a
    run too short for all to overlap (actors start one after another), the whole run."""
    begin = max(times[0] for times in lineages.values())
    end = min(times[-1] for times in lineages.values())
    if end > begin:
        return begin, end, True
    return (min(times[0] for times in lineages.values()),
            max(times[-1] for times in lineages.values()), False)


def run_scale(gpus: int, lineages_per_gpu: int, candidates: int,
              simulation: Simulation, out: Path) -> ScaleRow:
    """One simulated run on ``gpus`` of the cluster's simulated GPUs."""
    name = f"gpus-{gpus}"
    run_dir = out / "runs" / name
    lineages = gpus * lineages_per_gpu
    run = RunInfo(run_id=name, name=name, run_dir=run_dir, task="simulated", language="cpp",
                  lineages=lineages, params={"simulated.gpus": gpus,
                                             "simulated.service_s": simulation.service_s})
    spec = SwarmSpec(
        run=run, sinks=[ParquetSink(), MLflowSink(f"sqlite:///{out}/mlflow.db", "cluster-scale",
                                                  candidate_sources=True)],
        start=simulated_start(), make_evaluator=partial(SimulatedEvaluator, simulation),
        make_roles=partial(simulated_roles, simulation), seeds=list(range(lineages)),
        budget=Budget(candidates=candidates), workers=gpus,
        worker_resources={"num_cpus": 0, "resources": {SIM_GPU: 1}})
    swarm = Swarm(spec)
    swarm.start()
    while not swarm.done(timeout=1.0):
        pass
    result = swarm.finish()
    table = read_evaluations(run_dir).to_pylist()
    by_lineage: dict[int, list[float]] = {}
    for row in table:
        if row["lineage"] >= 0:
            by_lineage.setdefault(row["lineage"], []).append(row["timestamp"])
    begin, end, steady = _window({k: sorted(v) for k, v in by_lineage.items()})
    inside = sum(1 for times in by_lineage.values() for t in times if begin < t <= end)
    served = [e for e in read_trace(simulation.trace_dir) if e[0] == SERVED]
    busy_s = sum(max(0.0, min(e[3], end) - max(e[2], begin)) for e in served)
    span = max(end - begin, 1e-9)
    return ScaleRow(
        gpus=gpus, lineages=lineages, recorded=len({row["seq"] for row in table}),
        executed=len(served), window_s=end - begin, steady=steady, throughput=inside / span,
        ideal=gpus / simulation.service_s, busy=busy_s / (gpus * span),
        overhead=overhead(simulation.trace_dir),
        lineage_errors=tuple(r.error.splitlines()[-1] for r in result.lineages if r.error)
        + tuple(result.sink_errors))


def cluster_nodes(gpus: int, nodes: int) -> list[NodeSpec]:
    """``gpus`` simulated GPUs spread over ``nodes`` nodes (the head holds none)."""
    share = [gpus // nodes + (i < gpus % nodes) for i in range(nodes)]
    return [NodeSpec(num_cpus=1, resources={SIM_GPU: n}) for n in share if n]


@dataclass(frozen=True)
class Settings:
    """What ``measure`` runs (the command line's options)."""

    gpu_counts: tuple[int, ...] = (1, 2, 4, 8)
    nodes: int = 2
    lineages_per_gpu: int = 1
    candidates: int = 16
    service_s: float = 0.5
    compile_s: float = 0.02
    ingest_records: int = 2000
    ingest_lineages: int = 64
    ingest_in_flight: int = 64
    ingest_sinks: tuple[str, ...] = INGEST_SINKS


def measure(settings: Settings, out: Path) -> tuple[list[ScaleRow], list[IngestRow]]:
    """Every GPU count, one after the other, then the ingest rate, on one cluster holding the
    most simulated GPUs asked for."""
    rows, ingest = [], []
    with LocalCluster(cluster_nodes(max(settings.gpu_counts), settings.nodes)):
        for gpus in settings.gpu_counts:
            simulation = Simulation(out / "trace" / f"gpus-{gpus}", settings.service_s,
                                    settings.compile_s)
            rows.append(run_scale(gpus, settings.lineages_per_gpu, settings.candidates,
                                  simulation, out))
        for sinks in settings.ingest_sinks if settings.ingest_records else ():
            if sinks == FLOOR:
                ingest.append(measure_floor(settings.ingest_records, settings.ingest_lineages,
                                            settings.ingest_in_flight, out))
                continue
            ingest.append(measure_ingest(settings.ingest_records, settings.ingest_lineages,
                                         settings.ingest_in_flight, out,
                                         mlflow=sinks == "parquet+mlflow"))
    return rows, ingest


def _table(rows: list[ScaleRow]) -> str:
    one = next((r.throughput for r in rows if r.gpus == 1), None)
    lines = [f"{'sim GPUs':>8} {'lineages':>8} {'evals/s':>8} {'ideal':>6} {'vs linear':>9} "
             f"{'busy':>6} {'overhead ms':>11} {'claim':>6} {'dispatch':>8} {'return':>6} "
             f"{'record':>6} {'recorded':>8} {'executed':>8}"]
    for r in rows:
        linear = f"{r.throughput / (r.gpus * one):.1%}" if one else "-"
        o = r.overhead
        rate = f"{r.throughput:.2f}" + ("" if r.steady else "*")
        lines.append(f"{r.gpus:>8} {r.lineages:>8} {rate:>8} {r.ideal:>6.1f} "
                     f"{linear:>9} {r.busy:>6.1%} {o.total_ms:>11.1f} {o.claim_ms:>6.1f} "
                     f"{o.dispatch_ms:>8.1f} {o.return_ms:>6.1f} {o.record_ms:>6.1f} "
                     f"{r.recorded:>8} {r.executed:>8}")
    if not all(r.steady for r in rows):
        lines.append("* the lineages never all ran at once (a short run): over the whole run")
    return "\n".join(lines)


def targets(rows: list[ScaleRow], ingest: list[IngestRow]) -> dict[str, dict[str, object]]:
    """Each target, the figure it is judged on, and whether it is met."""
    out: dict[str, dict[str, object]] = {}
    one = next((r.throughput for r in rows if r.gpus == 1), None)
    if one:
        most = max(rows, key=lambda r: r.gpus)
        linear = most.throughput / (most.gpus * one)
        out["throughput vs linear"] = {"at_gpus": most.gpus, "value": linear,
                                       "target": THROUGHPUT_TARGET,
                                       "met": linear >= THROUGHPUT_TARGET}
    worst = max((r.overhead.total_ms for r in rows), default=float("nan"))
    out["overhead median ms (worst GPU count)"] = {"value": worst, "target": OVERHEAD_TARGET_MS,
                                                   "met": worst <= OVERHEAD_TARGET_MS}
    for row in ingest:
        if row.sinks == FLOOR:  # not the tracker: what any tracker's rate is bounded by here
            continue
        rate = min(row.acknowledged_per_s, row.through_mlflow_per_s)
        out[f"ingest per s, {row.sinks}"] = {"value": rate, "target": INGEST_TARGET,
                                             "met": rate >= INGEST_TARGET}
    return out


def _target_lines(judged: dict[str, dict[str, object]]) -> list[str]:
    return [f"{name}: {entry['value']:.3g} (target {entry['target']:g}): "
            f"{'met' if entry['met'] else 'NOT met'}" for name, entry in judged.items()]


def _ingest_line(row: IngestRow) -> str:
    if row.sinks == FLOOR:
        return (f"the calls alone, to an actor that does nothing with them ({row.records} "
                f"records, {row.in_flight} in flight): {row.acknowledged_per_s:,.0f}/s; its "
                f"CPU {row.tracker_cpu_ms:.2f} ms per call (the ceiling of any tracker here)")
    return (f"tracker ingest, {row.sinks} ({row.records} records, {row.lineages} lineages, "
            f"{row.in_flight} in flight): {row.acknowledged_per_s:,.0f}/s acknowledged "
            f"(Parquet synced), {row.through_mlflow_per_s:,.0f}/s through MLflow; tracker CPU "
            f"{row.tracker_cpu_ms:.2f} ms per record; "
            f"Parquet holds {row.parquet_records} in {row.parquet_files} files, MLflow "
            f"{row.mlflow_records}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", default="1,2,4,8", help="simulated GPU counts, comma-separated")
    parser.add_argument("--nodes", type=int, default=2, help="worker nodes holding the GPUs")
    parser.add_argument("--lineages-per-gpu", type=int, default=1)
    parser.add_argument("--candidates", type=int, default=16, help="per lineage")
    parser.add_argument("--service-s", type=float, default=0.5,
                        help="seconds a simulated GPU is busy per evaluation")
    parser.add_argument("--compile-s", type=float, default=0.02,
                        help="seconds a simulated compile sleeps on the lineage's CPU")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for the runs and traces (default: a temporary one)")
    parser.add_argument("--ingest-records", type=int, default=2000,
                        help="records fed to the tracker for its ingest rate (0: skip)")
    parser.add_argument("--ingest-lineages", type=int, default=64)
    parser.add_argument("--ingest-in-flight", type=int, default=64,
                        help="record calls outstanding at once")
    parser.add_argument("--ingest-sinks", default=",".join(INGEST_SINKS),
                        help=f"sink sets to measure ingest with, of {', '.join(INGEST_SINKS)}")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    sinks = tuple(args.ingest_sinks.split(","))
    if not set(sinks) <= set(INGEST_SINKS):
        parser.error(f"--ingest-sinks: {args.ingest_sinks!r} is not a list of "
                     f"{', '.join(INGEST_SINKS)}")
    settings = Settings(tuple(int(v) for v in args.gpus.split(",")), args.nodes,
                        args.lineages_per_gpu, args.candidates, args.service_s, args.compile_s,
                        args.ingest_records, args.ingest_lineages, args.ingest_in_flight, sinks)
    out = args.out or Path(tempfile.mkdtemp(prefix="cluster-scale-"))
    began = time.monotonic()
    rows, ingest = measure(settings, out)
    if args.json:
        print(json.dumps({"settings": asdict(settings), "out": str(out),
                          "rows": [asdict(r) for r in rows],
                          "ingest": [asdict(r) for r in ingest],
                          "targets": targets(rows, ingest)}, indent=2))
    else:
        print(f"SIMULATED GPUs ({SIM_GPU} Ray resource) on {settings.nodes} worker node(s); "
              f"service {settings.service_s:g} s, simulated compile {settings.compile_s:g} s, "
              f"{settings.candidates} candidates per lineage; runs under {out}")
        print(_table(rows))
        for row in ingest:
            print(_ingest_line(row))
        print("\n".join(_target_lines(targets(rows, ingest))))
        print(f"({time.monotonic() - began:.0f} s in all)")
    return 1 if _report_problems(rows, ingest) else 0


def _report_problems(rows: list[ScaleRow], ingest: list[IngestRow]) -> bool:
    """Counts that disagree and errors, on stderr; whether there were any."""
    problems = [f"gpus={r.gpus}: Parquet holds {r.recorded} evaluations, the workers executed "
                f"{r.executed}; errors: {list(r.lineage_errors)}"
                for r in rows if r.recorded != r.executed or r.lineage_errors]
    for row in ingest:
        if row.sinks == FLOOR:
            continue
        mlflow = row.mlflow_records if row.sinks != "parquet" else row.records
        if row.sink_errors or not row.records == row.parquet_records == mlflow:
            problems.append(f"ingest ({row.sinks}): sent {row.records}, Parquet holds "
                            f"{row.parquet_records}, MLflow {row.mlflow_records}; errors: "
                            f"{list(row.sink_errors)}")
    for problem in problems:
        print(problem, file=sys.stderr)
    return bool(problems)


if __name__ == "__main__":
    sys.exit(main())
