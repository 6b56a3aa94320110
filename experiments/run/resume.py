"""Resuming a run: its Parquet records rebuilt into the candidates and verdicts they were.

Parquet is the source of truth: every record is on disk before the tracker acknowledged it, so
a run stopped by Ctrl-C, a crash or a lost machine resumes from exactly what was recorded. The
Optuna studies live in the run's journal file and resume on their own.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kernelswarm.search import (
    Candidate,
    Evaluation,
    Origin,
    Record,
    ShapeResult,
    Status,
    Task,
    load_task,
    source_suffix,
    typed_detail,
)

from ..config import ConfigError
from ..sinks import read_evaluations
from ..sinks.parquet import CANDIDATES, EVALUATIONS
from ..sinks.sources import read_kernel_file

_SHAPE_COLUMNS = [f for f in ShapeResult.__dataclass_fields__ if f != "shape"]
_TEXT_COLUMNS = {"best_baseline"}


class ResumeError(ConfigError):
    """A run folder that cannot be resumed; the message says what is missing or inconsistent."""


def _shape(row: Mapping[str, Any]) -> ShapeResult:
    # Columns added after a run was written read as null: NaN, or "" for text.
    values = {k: (("" if k in _TEXT_COLUMNS else math.nan) if row.get(k) is None
                  and k != "correct" else row[k]) for k in _SHAPE_COLUMNS}
    values["correct"] = bool(row["correct"])
    values["samples"] = int(values["samples"]) if not math.isnan(values["samples"]) else 0
    return ShapeResult(shape=row["shape"], **values)


def _candidate(run_dir: Path, row: Mapping[str, Any], task: Task) -> Candidate:
    cid, language = row["candidate_id"], row["language"]
    path = run_dir / CANDIDATES / f"{cid}{source_suffix(language)}"
    if not path.is_file():
        raise ResumeError(f"record {row['seq']}: the source of candidate {cid} is missing ({path})")
    if row["knob_space"] is None:
        raise ResumeError(f"{run_dir}: written by a version without knob spaces; start a new run")
    kernel = task.kernel(language)
    _, source = read_kernel_file(path.read_text(), language, kernel.entry)  # knob header off
    space = {k: tuple(v) for k, v in json.loads(row["knob_space"]).items()}
    origin = Origin(role=row["origin_role"], move=row["origin_move"],
                    rationale=row["origin_rationale"] or "", model=row["origin_model"],
                    tokens=int(row["tokens"]), cost_usd=float(row["cost_usd"]))
    candidate = Candidate.create(
        language=language, source=source, entry=kernel.entry,
        knobs=json.loads(row["knobs"]), knob_space=space, parents=tuple(row["parent_ids"]),
        lineage=int(row["lineage"]), origin=origin, spec=kernel.spec)
    if candidate.id != cid:
        raise ResumeError(f"record {row['seq']}: candidate {cid}'s stored source or knobs no longer "
                          f"hash to its id (was {path} edited?)")
    return candidate


def _json_object(text: str | None) -> dict[str, Any]:
    """A JSON object column (absent in folders written before it existed: empty)."""
    return json.loads(text) if text else {}


def restore_records(run_dir: Path, task: Task) -> list[Record]:
    """Every record of the run folder, in seq order, as the tracker accepted it."""
    try:
        rows = read_evaluations(run_dir).to_pylist()
    except FileNotFoundError as exc:
        raise ResumeError(str(exc)) from None
    by_seq: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_seq.setdefault(int(row["seq"]), []).append(row)
    if sorted(by_seq) != list(range(len(by_seq))):
        missing = sorted(set(range(max(by_seq, default=-1) + 1)) - set(by_seq))
        raise ResumeError(f"{run_dir}: records {missing[:10]} are missing from evaluations/")
    records = []
    for seq in sorted(by_seq):
        group = by_seq[seq]
        first = group[0]
        candidate = _candidate(run_dir, first, task)
        shapes = tuple(_shape(r) for r in group if r["shape"])
        evaluation = Evaluation(candidate.id, Status(first["status"]), first["message"],
                                shapes=shapes, compile_s=first["compile_s"],
                                eval_s=first["eval_s"], device=first["device"],
                                **typed_detail(_json_object(first.get("resources")),
                                               _json_object(first.get("metrics"))))
        records.append(Record(seq=seq, lineage=int(first["lineage"]), step=int(first["step"]),
                              candidate=candidate, evaluation=evaluation,
                              lineage_best=first["lineage_best"], global_best=first["global_best"],
                              wall_s=first["wall_s"], timestamp=first["timestamp"],
                              diversity=first.get("diversity") or 0.0))
    return records


def replay_records(run_dir: Path, task_path: Path, device: str = "cpu") -> list[Record]:
    """Every record the run folder holds so far; none before its first is written.

    What a restarted tracker rebuilds itself from (cluster/tracker_actor.py): built from plain
    paths, so it can be shipped to the tracker's process and called there at each start.
    """
    if not (Path(run_dir) / EVALUATIONS).is_dir():
        return []
    return restore_records(Path(run_dir), load_task(task_path, device))
