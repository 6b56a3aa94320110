"""The result sinks, driven by the real Tracker: what a person finds in Parquet and MLflow."""

from __future__ import annotations

import contextlib
import json
import math
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

from kernelswarm.experiments.sinks import (
    LoggedSearch,
    MLflowSink,
    ParquetSink,
    read_artifact_text,
    read_evaluations,
    read_mlflow_run,
)
from kernelswarm.experiments.sinks.sources import read_kernel_file
from kernelswarm.search import (
    Candidate,
    Evaluation,
    Origin,
    Record,
    RunInfo,
    RunSummary,
    ShapeResult,
    Sink,
    Status,
    Tracker,
)
from kernelswarm.search.stored_form import stored_detail

SHAPES = ("d=4096,n=64", "d=4096,n=1024")
LONG_NOTE = "x" * 7000  # longer than MLflow accepts for a param value


def kernel(lineage: int, variant: str, knobs: dict[str, Any] | None = None,
           parents: tuple[str, ...] = (), origin: Origin | None = None) -> Candidate:
    source = f'extern "C" void silu_and_mul(const float* x, float* y, long n) {{ /* {variant} */ }}\n'
    return Candidate.create(language="cpp", source=source, entry="silu_and_mul", knobs=knobs,
                            knob_space={"BLOCK": (64, 128, 256)}, parents=parents,
                            lineage=lineage, origin=origin)


def timed(candidate: Candidate, speedups: tuple[float, float], correct: bool = True) -> Evaluation:
    shapes = tuple(
        ShapeResult(shape=shape, max_abs_err=1e-7 * (i + 1), max_rel_err=2e-7, correct=correct,
                    time_us=10.0 / s, time_spread_us=0.1, samples=30 + i, start_time_us=10.0,
                    eager_time_us=25.0, speedup_vs_start=s, speedup_vs_eager=2.5 * s,
                    roofline_fraction=0.1 * s)  # speedup_vs_compile stays NaN: not measured
        for i, (shape, s) in enumerate(zip(SHAPES, speedups, strict=True)))
    status = Status.OK if correct else Status.INCORRECT
    message = "" if correct else f"max_abs_err 0.3 > atol 1e-05 on {SHAPES[1]}"
    return Evaluation(candidate.id, status, message, shapes, compile_s=0.4, eval_s=1.5,
                      device="cpu")


def failed(candidate: Candidate, status: Status, message: str) -> Evaluation:
    return Evaluation(candidate.id, status, message, compile_s=0.2, device="cpu")


def scenario() -> list[tuple[int, int, Candidate, Evaluation]]:
    """Two lineages with successes, a compile error, a crash and an incorrect kernel."""
    start0, start1 = kernel(0, "start"), kernel(1, "start")
    tuned = start0.derive(knobs={"BLOCK": 256}, origin=Origin(role="tuner", move="tune"))
    broken = start0.derive(source="not c++", origin=Origin(role="coder", move="rewrite:fast_exp",
                                                           model="gpt-x", tokens=812, cost_usd=0.01))
    wrong = kernel(1, "wrong", parents=(start1.id,))
    crash = kernel(1, "crash", parents=(start1.id,))
    best = kernel(1, "vectorised", {"BLOCK": 128}, (start1.id,), Origin(role="coder", move="rewrite"))
    incorrect = timed(wrong, (1.9, 2.0), correct=False)
    return [
        (0, 0, start0, timed(start0, (1.0, 1.0))),
        (1, 0, start1, timed(start1, (1.0, 1.0))),
        (0, 1, tuned, timed(tuned, (1.2, 1.8))),
        (1, 1, wrong, incorrect),
        (0, 2, broken, failed(broken, Status.COMPILE_ERROR, "error: expected ';' at line 1")),
        (1, 2, crash, failed(crash, Status.RUNTIME_ERROR, "killed by SIGSEGV in silu_and_mul")),
        (1, 3, best, timed(best, (2.0, 3.0))),
    ]


def run_info(run_dir: Path) -> RunInfo:
    params = {"run.name": "sinks", "run.seed": 7, "task.note": LONG_NOTE, "agent.llm:model": "m1",
              "search.lineages": 2, "evaluator.cache_dir": None}
    return RunInfo(run_id="r-0001", name="sinks", run_dir=run_dir, task="silu_and_mul",
                   language="cpp", lineages=2, params=params)


@dataclass
class Logged:
    """A whole scenario run through the Tracker into Parquet and one MLflow store."""

    run_dir: Path
    records: list[Record]
    summary: RunSummary
    tracker: Tracker
    mlflow: MLflowSink
    search: LoggedSearch  # what MLflow holds, read back once


def run_scenario(run_dir: Path, tracking_uri: str) -> Logged:
    # Shipped as it would be to a Ray actor: pickled before it is opened.
    mlflow_sink = pickle.loads(pickle.dumps(MLflowSink(tracking_uri, "kernelswarm-tests")))
    tracker = Tracker(run_info(run_dir), [ParquetSink(), mlflow_sink])
    records = [tracker.record(*entry) for entry in scenario()]
    summary = tracker.close("budget exhausted")
    search = read_mlflow_run(mlflow_sink.tracking_uri, mlflow_sink.parent_run_id)
    return Logged(run_dir, records, summary, tracker, mlflow_sink, search)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real ``mlflow server`` on loopback with a sqlite backend; yields its URI."""
    folder = tmp_path_factory.mktemp("server")
    port = free_port()
    command = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
               "--backend-store-uri", f"sqlite:///{folder / 'server.db'}",
               "--artifacts-destination", str(folder / "artifacts"), "--workers", "1"]
    # The job runner (for MLflow's GenAI jobs) is two more processes that slow the start.
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    log = open(folder / "server.log", "wb")
    # Its own session: the server forks uvicorn, and the whole group must go at the end.
    server = subprocess.Popen(command, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if server.poll() is not None:
                pytest.fail(f"mlflow server exited: {(folder / 'server.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"mlflow server did not answer in 90 s: "
                            f"{(folder / 'server.log').read_text()[-2000:]}")
            time.sleep(0.3)
        yield uri
    finally:
        stop_group(server)
        log.close()


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """Terminate the process group this test started, then kill whatever is left of it."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    except ProcessLookupError:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@pytest.fixture(scope="module")
def sqlite_logged(tmp_path_factory: pytest.TempPathFactory) -> Logged:
    folder = tmp_path_factory.mktemp("sqlite")
    return run_scenario(folder / "run", f"sqlite:///{folder / 'store' / 'mlflow.db'}")


@pytest.fixture(scope="module")
def server_logged(tmp_path_factory: pytest.TempPathFactory, mlflow_server: str) -> Logged:
    return run_scenario(tmp_path_factory.mktemp("served") / "run", mlflow_server)


@pytest.fixture(params=["sqlite", "server"])
def logged(request: pytest.FixtureRequest) -> Logged:
    return request.getfixturevalue(f"{request.param}_logged")


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


# Parquet ------------------------------------------------------------------------------------

def test_parquet_holds_one_row_per_shape_equal_to_what_was_recorded(sqlite_logged: Logged) -> None:
    rows = read_evaluations(sqlite_logged.run_dir).to_pylist()
    expected = []
    for r in sqlite_logged.records:
        c, e = r.candidate, r.evaluation
        common = {"run_id": "r-0001", "seq": r.seq, "lineage": r.lineage, "step": r.step,
                  "candidate_id": c.id, "parent_ids": list(c.parents), "language": "cpp",
                  "knobs": c.knob_values, "knob_space": {k: list(v) for k, v in c.space.items()},
                  "origin_role": c.origin.role, "origin_move": c.origin.move,
                  "origin_rationale": c.origin.rationale, "origin_model": c.origin.model,
                  "tokens": c.origin.tokens, "cost_usd": c.origin.cost_usd,
                  "status": e.status.value, "message": e.message, "candidate_speedup": e.speedup,
                  "lineage_best": r.lineage_best, "global_best": r.global_best,
                  "compile_s": e.compile_s, "eval_s": e.eval_s, "device": "cpu",
                  "wall_s": r.wall_s, "timestamp": r.timestamp, "diversity": r.diversity,
                  **dict(zip(("resources", "metrics"), stored_detail(e), strict=True))}
        for s in sorted(e.shapes, key=lambda s: s.shape):
            expected.append({**common, **asdict(s)})
        if not e.shapes:  # nothing was measured: an empty shape, and no per-shape figures
            expected.append({**common, **dict.fromkeys(asdict(ShapeResult("")), None), "shape": ""})
    for row in rows:
        row["knobs"] = json.loads(row["knobs"])
        row["knob_space"] = json.loads(row["knob_space"])
        row["resources"] = json.loads(row["resources"])
        row["metrics"] = json.loads(row["metrics"])
    assert len(rows) == len(expected) == 12
    for row, want in zip(rows, expected, strict=True):
        assert row.keys() == want.keys()
        differing = {k: (row[k], want[k]) for k in row if not same(row[k], want[k])}
        assert not differing, f"seq {want['seq']} shape {want['shape']!r}: {differing}"


def test_parquet_failures_keep_their_status_and_message(sqlite_logged: Logged) -> None:
    table = read_evaluations(sqlite_logged.run_dir)
    failures = [row for row in table.to_pylist() if row["status"] != "OK"]
    assert [(r["seq"], r["status"], r["shape"]) for r in failures] == [
        (3, "INCORRECT", SHAPES[1]), (3, "INCORRECT", SHAPES[0]),
        (4, "COMPILE_ERROR", ""), (5, "RUNTIME_ERROR", "")]
    assert failures[2]["message"] == "error: expected ';' at line 1"
    assert failures[3]["message"] == "killed by SIGSEGV in silu_and_mul"
    assert failures[2]["candidate_speedup"] == 0.0
    assert table.column("seq").to_pylist() == sorted(table.column("seq").to_pylist())


def test_parquet_writes_one_file_per_record_and_no_leftovers(sqlite_logged: Logged) -> None:
    files = sorted(p.name for p in (sqlite_logged.run_dir / "evaluations").iterdir())
    assert files == [f"part-{seq:08d}.parquet" for seq in range(7)]


def test_every_candidate_source_can_be_opened(sqlite_logged: Logged) -> None:
    folder = sqlite_logged.run_dir / "candidates"
    for record in sqlite_logged.records:
        path = folder / f"{record.candidate.id}.cpp"
        candidate = record.candidate
        # the file states the knob values the kernel was judged with, then its source
        assert read_kernel_file(path.read_text(), "cpp", candidate.entry) == (
            candidate.knob_values or None, candidate.source)
    assert len(list(folder.iterdir())) == len({r.candidate.id for r in sqlite_logged.records})


def test_parquet_resumes_by_appending(tmp_path: Path) -> None:
    run = run_info(tmp_path / "run")
    entries = scenario()
    first = Tracker(run, [ParquetSink()])
    for entry in entries[:3]:
        first.record(*entry)
    first.close("interrupted")
    kept = (run.run_dir / "evaluations" / "part-00000000.parquet").read_bytes()
    resumed = ParquetSink()  # a resumed run goes on numbering where the dataset ends
    resumed.open(run)
    for i, (lineage, step, candidate, evaluation) in enumerate(entries[3:]):
        resumed.write(Record(seq=3 + i, lineage=lineage, step=step, candidate=candidate,
                             evaluation=evaluation, lineage_best=0.0, global_best=0.0,
                             wall_s=1.0, timestamp=time.time()))
    table = read_evaluations(run.run_dir)
    assert sorted(set(table.column("seq").to_pylist())) == list(range(7))
    assert (run.run_dir / "evaluations" / "part-00000000.parquet").read_bytes() == kept
    assert resumed.location() == str(run.run_dir / "evaluations")


def test_reading_a_folder_that_is_not_a_run_says_so(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="run folder"):
        read_evaluations(tmp_path)


def test_a_failing_sink_is_disabled_while_parquet_keeps_every_record(tmp_path: Path) -> None:
    class Unreachable(Sink):
        def __init__(self) -> None:
            self.written: list[int] = []

        def open(self, run: RunInfo) -> None: ...

        def write(self, record: Record) -> None:
            if record.seq == 2:
                raise ConnectionError("tracking server unreachable")
            self.written.append(record.seq)

        def close(self, summary: RunSummary) -> None: ...

    broken = Unreachable()
    run = run_info(tmp_path / "run")
    tracker = Tracker(run, [ParquetSink(), broken])
    for entry in scenario():
        tracker.record(*entry)
    tracker.close("budget exhausted")
    assert broken.written == [0, 1]
    assert len(tracker.sink_errors) == 1 and "tracking server unreachable" in tracker.sink_errors[0]
    assert sorted(set(read_evaluations(run.run_dir).column("seq").to_pylist())) == list(range(7))


# MLflow (a local sqlite store, and a real tracking server) ----------------------------------

def test_mlflow_has_a_parent_run_and_one_finished_child_per_lineage(logged: Logged) -> None:
    sink, search = logged.mlflow, logged.search
    assert search.parent.name == "silu_and_mul cpp · 2 lineages"  # task and configuration
    assert search.parent.status == "FINISHED"
    assert sorted(search.lineages) == [0, 1]
    for lineage, run in search.lineages.items():
        assert run.name == f"lineage-{lineage}" and run.status == "FINISHED"
        assert run.tags["mlflow.parentRunId"] == sink.parent_run_id
        assert run.params["lineage"] == str(lineage) and run.params["run.seed"] == "7"
        assert run.params["agent.llm_model"] == "m1"
    tags = search.parent.tags
    assert (tags["task"], tags["language"], tags["run_id"]) == ("silu_and_mul", "cpp", "r-0001")
    assert tags["run_dir"] == str(logged.run_dir) and tags["stop_reason"] == "budget exhausted"
    params = search.parent.params
    assert params["search.lineages"] == "2" and params["evaluator.cache_dir"] == "null"
    assert len(params["task.note"]) == 6000 and params["task.note"].startswith("xxxx")


def test_mlflow_metric_histories_match_the_records(logged: Logged) -> None:
    search = logged.search
    for lineage, run in search.lineages.items():
        mine = [r for r in logged.records if r.lineage == lineage]
        rates = [sum(r.evaluation.ok for r in mine[:i + 1]) / (i + 1) for i in range(len(mine))]
        assert run.metrics["candidate_speedup"] == [(r.step, r.evaluation.speedup) for r in mine]
        assert run.metrics["best_speedup"] == [(r.step, r.lineage_best) for r in mine]
        assert run.metrics["correct"] == [(r.step, float(r.evaluation.ok)) for r in mine]
        assert run.metrics["correct_rate"] == list(zip([r.step for r in mine], rates, strict=True))
        assert run.metrics["compile_s"] == [(r.step, r.evaluation.compile_s) for r in mine]
        assert run.metrics["eval_s"] == [(r.step, r.evaluation.eval_s) for r in mine]
    assert search.parent.metrics["global_best"] == [(r.seq, r.global_best) for r in logged.records]
    assert search.parent.metrics["best_speedup"] == [(0, pytest.approx(math.sqrt(6.0)))]
    assert search.parent.metrics["records"] == [(0, 7.0)]


def test_mlflow_agrees_with_parquet(logged: Logged) -> None:
    search = logged.search
    rows = read_evaluations(logged.run_dir).to_pylist()
    per_record = {(row["lineage"], row["step"]): row["candidate_speedup"] for row in rows}
    logged_speedups = {(lineage, step): value for lineage, run in search.lineages.items()
                       for step, value in run.metrics["candidate_speedup"]}
    assert logged_speedups == per_record


def test_mlflow_best_kernel_artifacts_are_the_best_sources(logged: Logged) -> None:
    uri, parent = logged.mlflow.tracking_uri, logged.mlflow.parent_run_id
    best, evaluation = logged.summary.best or (None, None)
    assert best is not None and evaluation is not None
    assert read_artifact_text(uri, parent, f"best/{best.id}.cpp.txt") == best.source
    described = json.loads(read_artifact_text(uri, parent, "best.json"))
    assert described["candidate_id"] == best.id and described["knobs"] == {"BLOCK": 128}
    assert [s["speedup_vs_start"] for s in described["shapes"]] == [2.0, 3.0]
    assert described["shapes"][0]["speedup_vs_compile"] is None
    for lineage, (candidate, _) in logged.summary.lineage_best.items():
        run = logged.search.lineages[lineage]
        assert read_artifact_text(uri, run.run_id, f"best/{candidate.id}.cpp.txt") == candidate.source
        tried = {f"candidates/{r.candidate.id}.cpp.txt" for r in logged.records if r.lineage == lineage}
        assert tried <= set(run.artifacts)


def test_mlflow_sqlite_artifacts_sit_next_to_the_database(sqlite_logged: Logged) -> None:
    from mlflow.tracking import MlflowClient

    sink = sqlite_logged.mlflow
    database = Path(sink.tracking_uri.removeprefix("sqlite:///"))
    run = MlflowClient(sink.tracking_uri).get_run(sink.parent_run_id)
    assert run.info.artifact_uri.startswith((database.parent / "mlartifacts").as_uri())
    best = sqlite_logged.summary.best
    assert best is not None
    stored = database.parent / "mlartifacts" / "kernelswarm-tests" / sink.parent_run_id
    assert (stored / "artifacts" / "best" / f"{best[0].id}.cpp.txt").read_text() == best[0].source
    assert f"mlflow ui --backend-store-uri {sink.tracking_uri}" in sink.location()
    assert sink.parent_run_id in sink.location()


def test_mlflow_sink_resolves_a_relative_sqlite_path(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    sink = MLflowSink("sqlite:///store/mlflow.db", "e")
    assert sink.tracking_uri == f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"


def test_a_run_without_a_correct_kernel_still_finishes_in_mlflow(tmp_path: Path) -> None:
    sink = MLflowSink(f"sqlite:///{tmp_path / 'mlflow.db'}", "failures")
    tracker = Tracker(run_info(tmp_path / "run"), [ParquetSink(), sink])
    failing = [entry for entry in scenario() if not entry[3].ok]
    for entry in failing:
        tracker.record(*entry)
    assert tracker.close("no progress").best is None and not tracker.sink_errors
    search = read_mlflow_run(sink.tracking_uri, sink.parent_run_id)
    assert search.parent.status == "FINISHED" and search.parent.tags["stop_reason"] == "no progress"
    assert search.parent.metrics["best_speedup"] == [(0, 0.0)]
    assert not any(path.startswith("best") for path in search.parent.artifacts)
    assert [run.status for run in search.lineages.values()] == ["FINISHED", "FINISHED"]
    assert len(read_evaluations(tmp_path / "run")) == 4  # INCORRECT has two shapes
