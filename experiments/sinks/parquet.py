"""The Parquet sink: the run's append-only table of evaluations, the source of truth for reports
and resume.

Layout under the run folder::

    evaluations/part-00000000.parquet   one file per record, named by its seq, or one file
    evaluations/part-00000001-00000042.parquet  per batch of records written together (the
                                        tracker's group commit), named by first and last seq
    candidates/<candidate id>.<suffix>  every candidate's source, written once, with the knob
                                        values it was judged with at the top (sinks/sources.py)

Each file holds one row per (record, shape); a record whose evaluation has no shapes (a compile
error, a crash before the first shape) has one row whose ``shape`` is ``""`` and whose per-shape
columns are null. Files appear atomically (written under a hidden temporary name, synced, then
renamed), so a reader never sees half a record and a crash loses at most the record in flight.

Columns (``SCHEMA``):

=========================  =================  ===============================================
column                     type               meaning
=========================  =================  ===============================================
run_id                     string             ``RunInfo.run_id``
seq                        int64              the record's place in the run's total order
lineage                    int64              the lineage that recorded it
step                       int64              the lineage's step number
candidate_id               string             content hash of (language, source, knobs)
parent_ids                 list<string>       the candidates it was derived from
language                   string             cpp | cuda | torch-ext | triton
knobs                      string             JSON object of knob values, keys sorted
knob_space                 string             JSON object: each knob's allowed values
origin_role                string             seed | coder | tuner | migrant
origin_move                string             the plan's move, e.g. ``tune``
origin_rationale           string             why the planner chose that move
origin_model               string             the model that proposed it (``builtin`` for rules)
tokens                     int64              LLM tokens spent proposing it
cost_usd                   float64            LLM cost of proposing it
status                     string             OK, COMPILE_ERROR, REJECTED, RUNTIME_ERROR, ...
message                    string             what went wrong, for a person to act on
candidate_speedup          float64            geometric-mean speedup vs the start; 0 unless OK
lineage_best               float64            the lineage's best speedup after this record
global_best                float64            the run's best speedup after this record
compile_s                  float64            seconds spent compiling
eval_s                     float64            seconds spent checking and timing
device                     string             where it was timed
wall_s                     float64            seconds since the run started
timestamp                  float64            Unix time (seconds) when it was recorded
diversity                  float64            the archive's diversity after this record
resources                  string             JSON: registers, shared memory, binary hash, ...
metrics                    string             JSON: profiler metrics (torch.profiler, Nsight
                                              Compute when on), machine figures, timing settings
shape                      string             the shape's label, e.g. ``d=4096,n=64``; ``""``
correct                    bool               correct on this shape
max_abs_err                float64            largest absolute error vs the reference
max_rel_err                float64            largest relative error vs the reference
time_us                    float64            median time (microseconds); NaN if not timed
time_spread_us             float64            interquartile range of the time
samples                    int64              timed calls behind the median
start_time_us              float64            the starting kernel, timed interleaved
eager_time_us              float64            the PyTorch reference (eager)
speedup_vs_start           float64
speedup_vs_eager           float64
speedup_vs_compile         float64            NaN where torch.compile was not measured
roofline_fraction          float64            ideal time / measured time
start_spread_us            float64            IQR of the starting kernel's time
eager_spread_us            float64            IQR of eager's time
compile_time_us            float64            torch.compile(dynamic=False) for this shape, its
                                              fastest mode
compile_spread_us          float64            IQR of compile's time
best_baseline              string             the fastest baseline on this shape: ``eager``,
                                              ``compile`` or a library (e.g. ``liger``)
best_baseline_us           float64            its time
best_baseline_spread_us    float64            its IQR
speedup_vs_best            float64            best_baseline_us / time_us
speedup_vs_*_ci            float64            half-width of the speedup's 95% confidence interval
=========================  =================  ===============================================

Files written before a column existed read it as null (``read_evaluations`` fills it).
``resources`` and ``metrics`` hold ``Evaluation``'s free-form maps with its typed fields (machine,
baselines, kernel resources, profile, cost, ...) under the keys they had before they were fields
(kernelswarm.search.measured: ``stored_detail`` writes them, ``typed_detail`` reads them back).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kernelswarm.search import Record, RunInfo, RunSummary, ShapeResult, Sink, stored_detail

from .sources import self_contained_source, source_file_name

EVALUATIONS = "evaluations"
CANDIDATES = "candidates"

_RECORD_FIELDS = [
    pa.field("run_id", pa.string()),
    pa.field("seq", pa.int64()),
    pa.field("lineage", pa.int64()),
    pa.field("step", pa.int64()),
    pa.field("candidate_id", pa.string()),
    pa.field("parent_ids", pa.list_(pa.string())),
    pa.field("language", pa.string()),
    pa.field("knobs", pa.string()),
    pa.field("knob_space", pa.string()),
    pa.field("origin_role", pa.string()),
    pa.field("origin_move", pa.string()),
    pa.field("origin_rationale", pa.string()),
    pa.field("origin_model", pa.string()),
    pa.field("tokens", pa.int64()),
    pa.field("cost_usd", pa.float64()),
    pa.field("status", pa.string()),
    pa.field("message", pa.string()),
    pa.field("candidate_speedup", pa.float64()),
    pa.field("lineage_best", pa.float64()),
    pa.field("global_best", pa.float64()),
    pa.field("compile_s", pa.float64()),
    pa.field("eval_s", pa.float64()),
    pa.field("device", pa.string()),
    pa.field("wall_s", pa.float64()),
    pa.field("timestamp", pa.float64()),
    pa.field("diversity", pa.float64()),
    pa.field("resources", pa.string()),
    pa.field("metrics", pa.string()),
]
_SHAPE_FIELDS = [
    pa.field("shape", pa.string()),
    pa.field("correct", pa.bool_()),
    pa.field("max_abs_err", pa.float64()),
    pa.field("max_rel_err", pa.float64()),
    pa.field("time_us", pa.float64()),
    pa.field("time_spread_us", pa.float64()),
    pa.field("samples", pa.int64()),
    pa.field("start_time_us", pa.float64()),
    pa.field("eager_time_us", pa.float64()),
    pa.field("speedup_vs_start", pa.float64()),
    pa.field("speedup_vs_eager", pa.float64()),
    pa.field("speedup_vs_compile", pa.float64()),
    pa.field("roofline_fraction", pa.float64()),
    pa.field("start_spread_us", pa.float64()),
    pa.field("eager_spread_us", pa.float64()),
    pa.field("compile_time_us", pa.float64()),
    pa.field("compile_spread_us", pa.float64()),
    pa.field("best_baseline", pa.string()),
    pa.field("best_baseline_us", pa.float64()),
    pa.field("best_baseline_spread_us", pa.float64()),
    pa.field("speedup_vs_best", pa.float64()),
    pa.field("speedup_vs_start_ci", pa.float64()),
    pa.field("speedup_vs_eager_ci", pa.float64()),
    pa.field("speedup_vs_compile_ci", pa.float64()),
    pa.field("speedup_vs_best_ci", pa.float64()),
]
SCHEMA = pa.schema(_RECORD_FIELDS + _SHAPE_FIELDS)
"""The fixed schema of every evaluations file (see the module docstring)."""


def evaluation_rows(run_id: str, record: Record) -> list[dict[str, Any]]:
    """The rows one record contributes: one per shape, or one with an empty shape if none."""
    candidate, evaluation = record.candidate, record.evaluation
    resources, metrics = stored_detail(evaluation)  # typed fields under their old keys
    common: dict[str, Any] = {
        "run_id": run_id,
        "seq": record.seq,
        "lineage": record.lineage,
        "step": record.step,
        "candidate_id": candidate.id,
        "parent_ids": list(candidate.parents),
        "language": candidate.language,
        "knobs": json.dumps(candidate.knob_values, sort_keys=True, default=str),
        "knob_space": json.dumps(candidate.space, sort_keys=True, default=str),
        "origin_role": candidate.origin.role,
        "origin_move": candidate.origin.move,
        "origin_rationale": candidate.origin.rationale,
        "origin_model": candidate.origin.model,
        "tokens": candidate.origin.tokens,
        "cost_usd": candidate.origin.cost_usd,
        "status": evaluation.status.value,
        "message": evaluation.message,
        "candidate_speedup": evaluation.speedup,
        "lineage_best": record.lineage_best,
        "global_best": record.global_best,
        "compile_s": evaluation.compile_s,
        "eval_s": evaluation.eval_s,
        "device": evaluation.device,
        "wall_s": record.wall_s,
        "timestamp": record.timestamp,
        "diversity": record.diversity,
        "resources": json.dumps(resources, sort_keys=True, default=str),
        "metrics": json.dumps(metrics, sort_keys=True, default=str),
    }
    if not evaluation.shapes:
        return [{**common, "shape": ""}]  # per-shape columns left null: nothing was measured
    return [{**common, **_shape_columns(result)} for result in evaluation.shapes]


def _shape_columns(result: ShapeResult) -> dict[str, Any]:
    return {field.name: getattr(result, field.name) for field in _SHAPE_FIELDS}


def _temporary(path: Path) -> Path:
    # The leading dot keeps readers (and pyarrow's dataset discovery) off the unfinished file.
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def _write_synced(files: dict[Path, bytes]) -> None:
    """Each file's bytes under its temporary name, written and synced in parallel: the file
    system commits concurrent syncs together, where one after another each waits for its own."""
    try:
        list(_sync_pool().map(_write_one, [_temporary(p) for p in files], files.values()))
    except BaseException:
        for path in files:
            _temporary(path).unlink(missing_ok=True)
        raise


def _write_one(temporary: Path, data: bytes) -> None:
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(descriptor, view):]
        os.fsync(descriptor)  # the record is acknowledged after this: it must be on disk
    finally:
        os.close(descriptor)


def _publish(paths: list[Path]) -> None:
    """Rename synced temporaries to their names, then sync each folder (the renames durable)."""
    for path in paths:
        os.replace(_temporary(path), path)
    for folder in dict.fromkeys(path.parent for path in paths):
        _sync_folder(folder)


_SYNC_THREADS = 16
_pool: ThreadPoolExecutor | None = None


def _sync_pool() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(_SYNC_THREADS, thread_name_prefix="parquet-sync")
    return _pool


def _sync_folder(folder: Path) -> None:
    # Makes the rename itself durable; not every platform lets a folder be opened for this.
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


class ParquetSink(Sink):
    """Writes every record as one Parquet file under ``run_dir/evaluations`` before it is
    acknowledged, and every candidate's source once under ``run_dir/candidates``.

    Not thread-safe on its own: the tracker writes durable sinks one batch at a time, in seq
    order. A record written again with the same seq (a replay after a crash) replaces its file
    whole; a batch is one file, so a crash loses the whole batch in flight or none of it.
    """

    durable = True

    def __init__(self) -> None:
        self._run: RunInfo | None = None

    @property
    def folder(self) -> Path:
        """The dataset folder (``run_dir/evaluations``); valid once opened."""
        return self._opened().run_dir / EVALUATIONS

    @property
    def sources(self) -> Path:
        """Where candidates' sources are written (``run_dir/candidates``); valid once opened."""
        return self._opened().run_dir / CANDIDATES

    def _opened(self) -> RunInfo:
        if self._run is None:
            raise RuntimeError("ParquetSink used before open()")
        return self._run

    def open(self, run: RunInfo) -> None:
        self._run = run
        # Existing files are kept: resuming a run appends to the same dataset.
        self.folder.mkdir(parents=True, exist_ok=True)
        self.sources.mkdir(parents=True, exist_ok=True)

    def write(self, record: Record) -> None:
        self.write_batch([record])

    def write_batch(self, records: Sequence[Record]) -> None:
        """The records as one file (``part-<seq>`` for one, ``part-<first>-<last>`` for more),
        with the sources not written before: all synced together, then the sources made
        visible before the rows, so that no row ever names a kernel a person cannot open."""
        if not records:
            return
        sources: dict[Path, bytes] = {}
        for record in records:
            path = self.sources / source_file_name(record.candidate)
            # The id is a content hash: an existing file holds this source already.
            if path not in sources and not path.exists():
                sources[path] = self_contained_source(record.candidate).encode()
        run_id = self._opened().run_id
        table = pa.Table.from_pylist([row for record in records
                                      for row in evaluation_rows(run_id, record)], schema=SCHEMA)
        encoded = pa.BufferOutputStream()
        pq.write_table(table, encoded)
        first, last = records[0].seq, records[-1].seq
        rows = self.folder / (f"part-{first:08d}.parquet" if len(records) == 1
                              else f"part-{first:08d}-{last:08d}.parquet")
        _write_synced({**sources, rows: encoded.getvalue().to_pybytes()})
        try:
            if sources:
                _publish(list(sources))
            _publish([rows])
        except BaseException:
            for path in [*sources, rows]:
                _temporary(path).unlink(missing_ok=True)
            raise

    def close(self, summary: RunSummary) -> None:
        """Nothing is buffered: every record is already on disk."""

    def location(self) -> str:
        return str(self.folder) if self._run is not None else ""


def read_evaluations(run_dir: str | os.PathLike[str]) -> pa.Table:
    """Every row a ``ParquetSink`` wrote for this run, sorted by seq then shape.

    Raises ``FileNotFoundError`` when the folder holds no evaluations dataset.
    """
    folder = Path(run_dir) / EVALUATIONS
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} does not exist: is {run_dir} a kernelswarm run folder?")
    files = sorted(str(path) for path in folder.glob("part-*.parquet"))
    if not files:
        return SCHEMA.empty_table()
    import pyarrow.dataset as ds  # imports pandas (~1 s of CPU): only where a run is read

    table = ds.dataset(files, schema=SCHEMA, format="parquet").to_table()
    return table.sort_by([("seq", "ascending"), ("shape", "ascending")])
