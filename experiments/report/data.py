"""What a report shows, read back from a run folder: its Parquet evaluations, summary.json,
config.json, the kernels' sources and the baselines the run was compared with.

Nothing here measures anything: a report states what the run recorded.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..sinks import read_evaluations
from ..views.carried_baselines import MeasuredBaselines, measured_of_run

# The verdicts a run can record, in the order the report lists them.
VERDICTS = ("OK", "SCREENED_OUT", "INCORRECT", "COMPILE_ERROR", "RUNTIME_ERROR", "TIMEOUT",
            "REJECTED")


class ReportError(ValueError):
    """The folder is not a run folder (nor a folder of run folders) a report can be built from."""


@dataclass(frozen=True)
class Record:
    """One evaluation as the report uses it (the per-record columns of the Parquet table)."""

    seq: int
    lineage: int
    step: int
    candidate_id: str
    status: str
    role: str
    move: str
    speedup: float
    lineage_best: float
    wall_s: float
    eval_s: float
    compile_s: float


@dataclass(frozen=True)
class ShapeFigures:
    """One shape of a kernel: its time and every baseline's, in microseconds (NaN: not
    measured), and its roofline fraction (ideal time / measured time)."""

    shape: str
    time_us: float
    start_us: float
    eager_us: float
    compile_us: float
    best_baseline: str
    best_baseline_us: float
    roofline_fraction: float
    speedup_vs_best: float
    # the factor the baseline times were carried over from their measurement by (views/
    # carried_baselines.py): the starting kernel's time now over then; 1.0 where unknown
    baseline_scale: float = 1.0


@dataclass(frozen=True)
class RunData:
    """A run folder as a report reads it."""

    run_dir: Path
    summary: dict[str, Any]
    config: dict[str, Any]
    records: tuple[Record, ...]
    best_shapes: tuple[ShapeFigures, ...]
    best_id: str
    best_source: str
    start_id: str
    start_source: str
    language: str
    # Per library baseline name: per shape its time (µs), carried over as eager's is.
    anchors: dict[str, dict[str, float]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    measured: MeasuredBaselines | None = None  # the cache entry the baselines came from

    @property
    def name(self) -> str:
        return self.run_dir.name

    @property
    def task(self) -> str:
        return str(self.config.get("task", {}).get("name", "?"))

    @property
    def baseline_names(self) -> list[str]:
        """Every baseline the run knows of: measured ones, then skipped ones."""
        names = ["eager", "compile", *sorted(self.anchors)]
        return list(dict.fromkeys([*names, *sorted(self.skipped)]))


def _number(value: Any) -> float:
    return math.nan if value is None else float(value)


def is_run_folder(folder: Path) -> bool:
    return (folder / "evaluations").is_dir() and (folder / "config.json").is_file()


def _source(run_dir: Path, candidate_id: str) -> str:
    for folder in ("best", "candidates"):
        found = sorted((run_dir / folder).glob(f"{candidate_id}.*"))
        if found:
            return found[0].read_text()
    return ""


def _anchor_table(measured: MeasuredBaselines | None,
                  shapes: tuple[ShapeFigures, ...]) -> dict[str, dict[str, float]]:
    """Library anchors (Liger, FlashInfer, ...) per shape from the baseline cache the run used,
    carried over by each shape's factor as eager's and compile's times were (so that the
    columns compare); empty when the cache entry is gone. Eager and compile are in the Parquet
    table already."""
    if measured is None:
        return {}
    scale = {s.shape: s.baseline_scale for s in shapes}
    anchors: dict[str, dict[str, float]] = {}
    for shape, times in measured.times_us.items():
        for name, us in times.items():
            if name not in ("eager", "compile"):
                anchors.setdefault(name, {})[shape] = us * scale.get(shape, 1.0)
    return anchors


def _carried(shapes: tuple[ShapeFigures, ...],
             measured: MeasuredBaselines | None) -> tuple[ShapeFigures, ...]:
    """``shapes`` with the factor each one's baseline times were carried over by."""
    if measured is None:
        return shapes
    return tuple(replace(s, baseline_scale=measured.scale(s.shape, s.start_us)) for s in shapes)


def _reported_shape(shape: dict[str, Any]) -> ShapeFigures:
    """A shape of summary.json's best kernel: the figures the closing table printed (after a
    confirmation, the median of its repeats, not the last repeat the Parquet table holds)."""
    time_us = _number(shape.get("time_us"))
    return ShapeFigures(
        shape=shape["shape"], time_us=time_us,
        start_us=time_us * _number(shape.get("speedup_vs_start")),
        eager_us=_number(shape.get("eager_time_us")),
        compile_us=_number(shape.get("compile_time_us")),
        best_baseline=shape.get("best_baseline") or "",
        best_baseline_us=_number(shape.get("best_baseline_us")),
        roofline_fraction=_number(shape.get("roofline_fraction")),
        speedup_vs_best=_number(shape.get("speedup_vs_best")))


def _recorded_shape(row: dict[str, Any]) -> ShapeFigures:
    """A shape of a Parquet row: the figures of a run that has no summary.json yet."""
    return ShapeFigures(
        shape=row["shape"], time_us=_number(row["time_us"]),
        start_us=_number(row["start_time_us"]), eager_us=_number(row["eager_time_us"]),
        compile_us=_number(row["compile_time_us"]), best_baseline=row["best_baseline"] or "",
        best_baseline_us=_number(row["best_baseline_us"]),
        roofline_fraction=_number(row["roofline_fraction"]),
        speedup_vs_best=_number(row["speedup_vs_best"]))


def load_run(run_dir: str | Path) -> RunData:
    """Everything a report of ``run_dir`` shows; ``ReportError`` if it is not a run folder."""
    folder = Path(run_dir).resolve()
    if not is_run_folder(folder):
        raise ReportError(f"{folder} is not a kernelswarm run folder (no evaluations/ and "
                          f"config.json in it)")
    config = json.loads((folder / "config.json").read_text())
    summary_path = folder / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    rows = read_evaluations(folder).to_pylist()
    records: dict[int, Record] = {}
    for row in rows:
        if row["seq"] not in records:
            records[row["seq"]] = Record(
                seq=row["seq"], lineage=row["lineage"], step=row["step"],
                candidate_id=row["candidate_id"], status=row["status"],
                role=row["origin_role"], move=row["origin_move"],
                speedup=_number(row["candidate_speedup"]),
                lineage_best=_number(row["lineage_best"]), wall_s=_number(row["wall_s"]),
                eval_s=_number(row["eval_s"]), compile_s=_number(row["compile_s"]))
    ordered = tuple(records[seq] for seq in sorted(records))
    start = next((r for r in ordered if r.lineage < 0), None)
    best = (summary.get("best") or {}).get("candidate_id")
    if best is None:  # no summary yet (a run still going): the fastest correct record so far
        ok = [r for r in ordered if r.status == "OK"]
        best = max(ok, key=lambda r: r.speedup).candidate_id if ok else ""
    reported = (summary.get("best") or {}).get("shapes")
    if reported:
        shapes = tuple(_reported_shape(shape) for shape in reported)
    else:
        best_seq = max((r.seq for r in ordered if r.candidate_id == best), default=-1)
        shapes = tuple(_recorded_shape(row) for row in rows
                       if row["seq"] == best_seq and row["shape"])
    # the best kernel's own (a run of several languages: search.languages), else the task's
    language = str((summary.get("best") or {}).get("language")
                   or config.get("task", {}).get("language", ""))
    skipped = dict((summary.get("baselines") or {}).get("skipped", {}))
    measured = measured_of_run(config, summary.get("baselines"), language)
    shapes = _carried(shapes, measured)
    return RunData(run_dir=folder, summary=summary, config=config, records=ordered,
                   best_shapes=shapes, best_id=best or "", best_source=_source(folder, best or ""),
                   start_id=start.candidate_id if start else "",
                   start_source=_source(folder, start.candidate_id) if start else "",
                   language=language, anchors=_anchor_table(measured, shapes),
                   skipped=skipped, measured=measured)


def run_folders(folder: str | Path) -> list[Path]:
    """The run folders directly inside ``folder`` (a sweep), sorted by name."""
    root = Path(folder).resolve()
    return sorted(p for p in root.iterdir() if p.is_dir() and is_run_folder(p))
