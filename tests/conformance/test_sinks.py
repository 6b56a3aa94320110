"""One behaviour suite over every result sink (``search.Sink``), as Optuna runs one storage suite
over every storage backend.

Each sink is driven by the real ``Tracker`` and read back the way a person (or ``resume``) reads
it: records arrive once and in order, survive a close and a reopen on the same run (a resumed
run), and a durable sink gives them back to ``resume`` as they were. A new sink joins by adding
a ``Backend`` to ``BACKENDS``; ``test_every_sink_has_a_backend`` fails until it does.

The LLM trace files are not a ``Sink`` (the roles append them; the MLflow sink follows them):
tests/agents/llm/test_trace.py checks that writer and reader agree.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from kernelswarm.cluster.sink_actor import ProcessSink
from kernelswarm.experiments.run.resume import restore_records
from kernelswarm.experiments.sinks import MLflowSink, ParquetSink, TrialMLflowSink, read_evaluations
from kernelswarm.experiments.sinks.mlflow_store import mlflow_client
from kernelswarm.search import (
    Candidate,
    Evaluation,
    Origin,
    Record,
    RunInfo,
    ShapeResult,
    Sink,
    Status,
    Task,
    Tracker,
    load_task,
)
from tests.conftest import ROOT, SILU_TASK

SHAPES = ("d=64,dtype=float32,tokens=1", "d=64,dtype=float32,tokens=7")
EXPERIMENT = "conformance"


@dataclass(frozen=True)
class Seen:
    """One record as a sink gives it back; a field the sink does not keep is None."""

    lineage: int
    step: int
    candidate_id: str | None
    status: str | None
    speedup: float


@dataclass(frozen=True)
class Backend:
    """How to make a sink and read back what it holds, in the order it holds it.

    ``make(store)`` and ``read(store, run)`` get a folder shared by the module's tests (one
    MLflow database: creating one costs seconds); runs are told apart by ``RunInfo.run_id``.
    """

    name: str
    make: Callable[[Path], Sink]
    read: Callable[[Path, RunInfo], list[Seen]]
    one_lineage: bool = False  # a sink of one study: every record under lineage 0, step = trial
    per_lineage: bool = False  # it orders records by lineage, then step (not by seq)
    ray: bool = False  # it starts a Ray actor (the test session's Ray instance is used)

    def expected(self, records: Sequence[Record]) -> list[Seen]:
        seen = [Seen(r.lineage, r.step, r.candidate.id, r.evaluation.status.value,
                     round(r.evaluation.speedup, 9)) for r in records]
        return sorted(seen, key=lambda s: (s.lineage, s.step)) if self.per_lineage else seen


def _parquet_read(folder: Path, run: RunInfo) -> list[Seen]:
    first: dict[int, dict] = {}  # one row per (record, shape): a record's first row
    for row in read_evaluations(run.run_dir).to_pylist():
        first.setdefault(int(row["seq"]), row)
    return [Seen(int(r["lineage"]), int(r["step"]), r["candidate_id"], r["status"],
                 round(float(r["candidate_speedup"]), 9)) for r in first.values()]


def _tracking_uri(folder: Path) -> str:
    return f"sqlite:///{folder / 'mlflow.db'}"


def _parents(folder: Path, run: RunInfo):
    client = mlflow_client(_tracking_uri(folder))
    experiment = client.get_experiment_by_name(EXPERIMENT)
    runs = client.search_runs([experiment.experiment_id],
                              filter_string=f"tags.run_id = '{run.run_id}'",
                              order_by=["attributes.start_time ASC"])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return client, parents, children


def _mlflow_read(folder: Path, run: RunInfo) -> list[Seen]:
    """Every lineage run's ``candidate_speedup`` history, by step; with a resumed run, the
    lineage runs of each parent run (one parent per session)."""
    client, _, children = _parents(folder, run)
    seen = []
    for child in children:
        lineage = int(child.data.tags["lineage"])
        for metric in client.get_metric_history(child.info.run_id, "candidate_speedup"):
            seen.append(Seen(lineage, metric.step, None, None, metric.value))
    return sorted(seen, key=lambda s: (s.lineage, s.step))  # a metric history's order is its step


def _trials_read(folder: Path, run: RunInfo) -> list[Seen]:
    """One child run per trial, in trial order."""
    client, _, children = _parents(folder, run)
    seen = [Seen(0, int(c.data.tags["trial"]), c.data.tags["candidate_id"], c.data.tags["status"],
                 c.data.metrics.get("speedup", math.nan)) for c in children]
    return sorted(seen, key=lambda s: s.step)


BACKENDS = {b.name: b for b in (
    Backend("parquet", lambda folder: ParquetSink(), _parquet_read),
    Backend("mlflow", lambda folder: MLflowSink(_tracking_uri(folder), EXPERIMENT), _mlflow_read,
            per_lineage=True),
    Backend("mlflow-trials", lambda folder: TrialMLflowSink(_tracking_uri(folder), EXPERIMENT),
            _trials_read, one_lineage=True),
    # What a TrackerActor runs MLflow as: the same sink, written from an actor of its own.
    Backend("mlflow-process",
            lambda folder: ProcessSink(MLflowSink(_tracking_uri(folder), EXPERIMENT)),
            _mlflow_read, per_lineage=True, ray=True),
)}


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> Backend:
    """The parametrized backend, with the session's Ray instance started if it needs one."""
    chosen = request.param
    if chosen.ray:
        request.getfixturevalue("ray_session")
    return chosen


def _sink_classes_in_the_tree() -> set[str]:
    """Names of the classes under the package folders that derive from ``Sink``, read from the
    source (so a sink in a module nothing here imports is found too)."""
    classes = []
    for layer in ("search", "agents", "evaluators", "cluster", "experiments"):
        for path in (ROOT / layer).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef):
                    bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")
                             for b in node.bases}
                    classes.append((node.name, bases))
    sinks = {"Sink"}
    while True:
        more = {name for name, bases in classes if bases & sinks} - sinks
        if not more:
            return sinks - {"Sink"}
        sinks |= more


def test_every_sink_has_a_backend():
    made = {type(b.make(Path("unused"))).__name__ for b in BACKENDS.values()}
    assert _sink_classes_in_the_tree() == made, "a Sink without a conformance backend (or back)"


@pytest.fixture(scope="module")
def task() -> Task:
    return load_task(SILU_TASK, "cpu")


def _timed(candidate: Candidate, speedup: float, correct: bool = True) -> Evaluation:
    shapes = tuple(ShapeResult(shape, max_abs_err=1e-7, max_rel_err=1e-7, correct=correct,
                               time_us=10.0 / speedup, time_spread_us=0.1, samples=20,
                               start_time_us=10.0, speedup_vs_start=speedup) for shape in SHAPES)
    status = Status.OK if correct else Status.INCORRECT
    return Evaluation(candidate.id, status, "" if correct else "output 0 differs", shapes,
                      compile_s=0.1, eval_s=0.5, device="cpu")


def _scenario(task: Task, one_lineage: bool) -> list[tuple[int, int, Candidate, Evaluation]]:
    """Two lineages (or one study) of cpp candidates of the real task, ok and failed ones."""
    start = task.starting_candidate("cpp")
    entries = []
    for i, speedup in enumerate((1.0, 1.3, 0.0, 1.7, 0.0, 2.1)):
        lineage = 0 if one_lineage else i % 2
        step = i if one_lineage else i // 2
        child = start.derive(source=start.source + f"// variant {i}\n", lineage=lineage,
                             origin=Origin(role="coder", move=f"rewrite:v{i}"))
        if speedup == 0.0 and i == 2:
            evaluation = Evaluation(child.id, Status.COMPILE_ERROR, "kernel.cpp:1: error: x",
                                    compile_s=0.2, device="cpu")
        else:
            evaluation = _timed(child, speedup or 0.8, correct=speedup != 0.0)
        entries.append((lineage, step, child, evaluation))
    return entries


def _run(tmp_path: Path) -> RunInfo:
    return RunInfo(run_id=tmp_path.name, name="conformance", run_dir=tmp_path / "run",
                   task="silu_and_mul", language="cpp", lineages=2)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sink-store")


@pytest.mark.parametrize("backend", BACKENDS.values(), ids=list(BACKENDS), indirect=True)
def test_records_arrive_once_and_in_order(backend, task, store, tmp_path):
    run = _run(tmp_path)
    tracker = Tracker(run, [backend.make(store)])
    records = [tracker.record(*entry) for entry in _scenario(task, backend.one_lineage)]
    tracker.close("budget exhausted")
    assert not tracker.sink_errors
    assert _masked(backend.read(store, run), records, backend) == backend.expected(records)


@pytest.mark.parametrize("backend", BACKENDS.values(), ids=list(BACKENDS), indirect=True)
def test_records_survive_a_close_and_a_reopen(backend, task, store, tmp_path):
    run, entries = _run(tmp_path), _scenario(task, backend.one_lineage)
    first = Tracker(run, [backend.make(store)])
    records = [first.record(*entry) for entry in entries[:3]]
    first.close("interrupted")
    # A resumed run: a new sink on the same run folder and store, the history already written.
    second = Tracker(run, [backend.make(store)], history=records)
    records += [second.record(*entry) for entry in entries[3:]]
    second.close("budget exhausted")
    assert [r.seq for r in records] == list(range(len(entries)))
    assert _masked(backend.read(store, run), records, backend) == backend.expected(records)


@pytest.mark.parametrize("backend", BACKENDS.values(), ids=list(BACKENDS), indirect=True)
def test_resume_reads_a_durable_sink_back_as_written(backend, task, store, tmp_path):
    sink = backend.make(store)
    if not sink.durable:
        pytest.skip(f"{backend.name} is fed in the background (durable = False); resume reads "
                    f"the durable sink")
    run = _run(tmp_path)
    tracker = Tracker(run, [sink])
    records = [tracker.record(*entry) for entry in _scenario(task, backend.one_lineage)]
    tracker.close("budget exhausted")
    restored = restore_records(run.run_dir, task)
    assert [(r.seq, r.lineage, r.step) for r in restored] == \
        [(r.seq, r.lineage, r.step) for r in records]
    for got, wrote in zip(restored, records, strict=True):
        assert got.candidate.id == wrote.candidate.id
        assert got.candidate.source == wrote.candidate.source
        assert got.evaluation.status is wrote.evaluation.status
        assert got.evaluation.message == wrote.evaluation.message
        assert math.isclose(got.evaluation.speedup, wrote.evaluation.speedup)
        assert [s.shape for s in got.evaluation.shapes] == \
            [s.shape for s in wrote.evaluation.shapes]


def test_every_backend_has_a_durable_sink_behind_resume():
    assert any(b.make(Path("unused")).durable for b in BACKENDS.values())


def _masked(seen: list[Seen], records: Sequence[Record], backend: Backend) -> list[Seen]:
    """``seen`` with the fields the sink does not keep filled from what was written, so that
    the comparison covers exactly what the sink holds."""
    by_key = {(r.lineage, r.step): r for r in records}
    out = []
    for s in seen:
        wrote = by_key.get((s.lineage, s.step))
        if wrote is None:
            out.append(s)  # a record nobody wrote: the comparison reports it
            continue
        out.append(Seen(s.lineage, s.step,
                        s.candidate_id if s.candidate_id is not None else wrote.candidate.id,
                        s.status if s.status is not None else wrote.evaluation.status.value,
                        round(s.speedup, 9) if math.isfinite(s.speedup) else s.speedup))
    return out
