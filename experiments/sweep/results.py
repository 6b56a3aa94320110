"""A sweep's results: one row per cell (``cells.parquet``), the closing table, and the sweep's
MLflow run, parent of every cell's run.

The rows are read back from the cells' run folders (``summary.json`` and the Parquet records),
the source of truth, so a resumed sweep's table holds every cell whatever session ran it.

Columns of ``cells.parquet``:

=====================  ==========  ===========================================================
column                 type        meaning
=====================  ==========  ===========================================================
sweep                  string      the sweep folder's name
cell                   string      the cell's name (its settings, e.g. ``task=x,lineages=2``)
folder                 string      its run folder inside the sweep folder
status                 string      finished | failed | interrupted | not run
message                string      why it failed or stopped early
settings               string      JSON object: the cell's settings over the base
task, language         string      what it searched ("cpp+triton": search.languages)
agent, model           string      the agent kind and the LLM model ("" for builtin)
lineages, seed         int64
records                int64       evaluations recorded (the starting kernel's included)
evaluations            int64       evaluations run on a worker: one per candidate (lineages
                                   that proposed the same kernel share it), none for a
                                   reused verdict or a failed build
correct                int64       records whose verdict is OK
eval_s                 float64     seconds on evaluation workers (GPU seconds on a GPU)
compile_s              float64     seconds compiling
tokens, cost_usd       int64/f64   LLM spending
wall_s                 float64     the cell's search, start to finish
best_candidate         string      the best kernel's id ("" when none)
speedup_vs_start       float64     the best kernel over the starting kernel (geomean)
speedup_vs_best        float64     over the fastest baseline per shape
best_baseline          string      which baselines those were (``/``-joined)
speedup_vs_eager       float64     over PyTorch eager
speedup_vs_compile     float64     over torch.compile (NaN when not measured)
=====================  ==========  ===========================================================
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from rich.markup import escape
from rich.table import Table

from ..sinks import read_evaluations
from ..views.speedups import speedup_text
from ..views.table_fit import fit
from .sweep_file import SweepCell

CELL_TABLE = "cells.parquet"

SCHEMA = pa.schema([
    ("sweep", pa.string()), ("cell", pa.string()), ("folder", pa.string()),
    ("status", pa.string()), ("message", pa.string()), ("settings", pa.string()),
    ("task", pa.string()), ("language", pa.string()), ("agent", pa.string()),
    ("model", pa.string()), ("lineages", pa.int64()), ("seed", pa.int64()),
    ("records", pa.int64()), ("evaluations", pa.int64()), ("correct", pa.int64()),
    ("eval_s", pa.float64()), ("compile_s", pa.float64()), ("tokens", pa.int64()),
    ("cost_usd", pa.float64()), ("wall_s", pa.float64()), ("best_candidate", pa.string()),
    ("speedup_vs_start", pa.float64()), ("speedup_vs_best", pa.float64()),
    ("best_baseline", pa.string()), ("speedup_vs_eager", pa.float64()),
    ("speedup_vs_compile", pa.float64()),
])


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) else math.nan


def _records(run_dir: Path) -> list[dict[str, Any]]:
    """One dict per record (its first row), in seq order; none when nothing was recorded."""
    try:
        rows = read_evaluations(run_dir).to_pylist()
    except FileNotFoundError:
        return []
    first: dict[int, dict[str, Any]] = {}
    for row in rows:
        first.setdefault(int(row["seq"]), row)
    return [first[seq] for seq in sorted(first)]


def judged(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records whose evaluation ran on a worker, one per candidate: lineages that proposed
    the same kernel record the one evaluation each, and a verdict reused from a kernel built to
    the same binary (``reused_from``) or a build that failed ran on none."""
    found: dict[str, dict[str, Any]] = {}
    for record in records:
        if (record["eval_s"] or 0) <= 0 or '"reused_from"' in (record.get("metrics") or ""):
            continue
        found.setdefault(record["candidate_id"], record)
    return list(found.values())


def cell_row(sweep: str, cell: SweepCell, run_dir: Path, status: str,
             message: str = "") -> dict[str, Any]:
    """The cell's row, read from its run folder."""
    config = cell.config
    records = _records(run_dir)
    summary_file = run_dir / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
    best = summary.get("best") or {}
    baselines = sorted({s.get("best_baseline") or "" for s in best.get("shapes", [])} - {""})
    model = config.agent.llm.model or config.agent.coder.model or ""
    return {
        "sweep": sweep, "cell": cell.name, "folder": cell.folder, "status": status,
        "message": message, "settings": json.dumps(dict(cell.settings)),
        "task": config.task.name, "language": "+".join(config.languages),
        "agent": config.agent.kind, "model": model if config.agent.kind == "llm" else "",
        "lineages": config.search.lineages, "seed": config.run.seed,
        "records": len(records),
        "evaluations": len(judged(records)),
        "correct": sum(1 for r in records if r["status"] == "OK"),
        "eval_s": sum(r["eval_s"] for r in judged(records)),
        "compile_s": sum(r["compile_s"] or 0.0 for r in records),
        "tokens": sum(int(r["tokens"] or 0) for r in records),
        "cost_usd": sum(r["cost_usd"] or 0.0 for r in records),
        "wall_s": _number(summary.get("wall_s")),
        "best_candidate": best.get("candidate_id") or "",
        "speedup_vs_start": _number(best.get("speedup_vs_start")),
        "speedup_vs_best": _number(best.get("speedup_vs_best")),
        "best_baseline": "/".join(baselines),
        "speedup_vs_eager": _number(best.get("speedup_vs_eager")),
        "speedup_vs_compile": _number(best.get("speedup_vs_compile")),
    }


def write_cell_table(sweep_dir: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """``cells.parquet``, replaced atomically (a reader never sees half a table)."""
    table = pa.Table.from_pylist([dict(r) for r in rows], schema=SCHEMA)
    path = sweep_dir / CELL_TABLE
    tmp = sweep_dir / f".{CELL_TABLE}.tmp"
    pq.write_table(table, tmp)
    tmp.replace(path)
    return path


CLOSING_COLUMNS = ("cell", "status", "records", "best vs start", "vs best baseline", "eval s",
                   "cost $")


def closing_table(name: str, rows: Sequence[Mapping[str, Any]], width: int | None = None) -> Table:
    """One line per cell: status, evaluations, its best kernel over the start and over the
    best baseline, worker seconds and LLM cost; columns are dropped to fit ``width``."""
    shown = []
    for r in rows:
        baseline = speedup_text(r["speedup_vs_best"])
        if baseline != "-" and r["best_baseline"]:
            baseline += f" ({r['best_baseline']})"
        shown.append({"cell": r["cell"], "status": r["status"], "records": str(r["records"]),
                      "best vs start": speedup_text(r["speedup_vs_start"]),
                      "vs best baseline": baseline, "eval s": f"{r['eval_s']:.1f}",
                      "cost $": f"{r['cost_usd']:.2f}" if r["cost_usd"] else "-"})

    def build(columns: tuple[str, ...]) -> Table:
        table = Table(title=escape(f"kernelswarm sweep {name}: best kernel per cell"))
        for column in columns:
            table.add_column(column, no_wrap=True, overflow="ellipsis",
                             justify="left" if column in ("cell", "status") else "right",
                             max_width=40 if column == "cell" else None)
        for values in shown:
            table.add_row(*(escape(values[c]) for c in columns),
                          style=None if values["status"] == "finished" else "yellow")
        return table

    # The cell and its status stay; figures go first, the best baseline last of them.
    return fit(build, CLOSING_COLUMNS, ("cost $", "eval s", "records", "vs best baseline",
                                        "status"), width)


def open_sweep_run(tracking_uri: str, experiment: str, name: str, params: Mapping[str, Any],
                   run_id: str = "") -> str:
    """The sweep's MLflow run (created, or ``run_id`` set running again on a resume)."""
    from mlflow.entities import Param

    from ..sinks.mlflow_sink import MLflowSink
    from ..sinks.mlflow_store import mlflow_client, param_key, param_value

    sink = MLflowSink(tracking_uri, experiment)
    client = mlflow_client(sink.tracking_uri)
    if run_id:
        client.update_run(run_id, status="RUNNING")
        return run_id
    experiment_id = sink.find_or_create_experiment(client)
    run = client.create_run(experiment_id, run_name=f"sweep {name}",
                            tags={"sweep": name, "kind": "sweep"})
    client.log_batch(run.info.run_id, params=[Param(param_key(k), param_value(v))
                                              for k, v in params.items()])
    return run.info.run_id


def close_sweep_run(tracking_uri: str, run_id: str, rows: Sequence[Mapping[str, Any]],
                    files: Sequence[Path], interrupted: bool) -> None:
    """Each cell's figures as metrics (``<figure>/<cell folder>``), the sweep's files as
    artifacts, and the run's end."""
    from mlflow.entities import Metric

    from ..sinks.mlflow_store import absolute_uri, mlflow_client, param_key

    client = mlflow_client(absolute_uri(tracking_uri))
    millis = int(time.time() * 1000)
    metrics = [Metric(param_key(f"{figure}/{r['folder']}"), float(r[figure]), millis, 0)
               for r in rows for figure in ("speedup_vs_start", "speedup_vs_best", "eval_s",
                                            "evaluations", "cost_usd")
               if math.isfinite(float(r[figure]))]
    metrics.append(Metric("cells_finished", float(sum(r["status"] == "finished" for r in rows)),
                          millis, 0))
    for start in range(0, len(metrics), 1000):
        client.log_batch(run_id, metrics=metrics[start:start + 1000])
    for path in files:
        client.log_artifact(run_id, str(path))
    client.set_terminated(run_id, "KILLED" if interrupted else "FINISHED")
