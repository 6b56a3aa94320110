"""One source for per-lineage results (the tracker's), the same in records, Parquet, the summary
and summary.json; a resumed run's summary covers the whole run."""

from __future__ import annotations

import json
import math
import time

import pytest

from kernelswarm.cluster.lineage_actor import LineageResult
from kernelswarm.cluster.swarm import SwarmResult
from kernelswarm.evaluators.measure.timing_protocol import TimingSettings
from kernelswarm.experiments.run.execute import write_outputs
from kernelswarm.experiments.sinks import ParquetSink, read_evaluations
from kernelswarm.search import (
    Candidate,
    Evaluation,
    Migration,
    Origin,
    RunInfo,
    ShapeResult,
    Status,
)
from kernelswarm.search.tracker import Tracker


def _candidate(source: str, lineage: int) -> Candidate:
    return Candidate.create(language="cpp", source=source, entry="f", lineage=lineage,
                            origin=Origin(role="coder", move="rewrite"))


def _ok(candidate: Candidate, speedup: float, spread: float = 0.0) -> Evaluation:
    shape = ShapeResult(shape="n=1", correct=True, time_us=10.0 / speedup,
                        time_spread_us=spread * 10.0 / speedup, samples=50, start_time_us=10.0,
                        speedup_vs_start=speedup)
    return Evaluation(candidate.id, Status.OK, "ok", shapes=(shape,), eval_s=1.0)


def _run(tmp_path) -> RunInfo:
    return RunInfo(run_id="r", name="r", run_dir=tmp_path, task="t", language="cpp", lineages=3)


def _last_lineage_best(run_dir) -> dict[int, float]:
    rows = read_evaluations(run_dir).to_pylist()
    return {r["lineage"]: r["lineage_best"] for r in sorted(rows, key=lambda r: r["seq"])}


def test_a_lineage_that_finds_a_kernel_it_also_received_counts_it_everywhere(tmp_path):
    tracker = Tracker(_run(tmp_path), [ParquetSink()],
                      migration=Migration(interval=1, count=2, topology="all"))
    weak, strong = _candidate("weak", 2), _candidate("strong", 0)
    tracker.record(2, 1, weak, _ok(weak, 1.774))
    tracker.record(0, 1, strong, _ok(strong, 4.368))
    tracker.record(1, 1, c1 := _candidate("one", 1), _ok(c1, 1.5))
    assert strong.id in {m[0].id for m in tracker.migrants(2, 1)}  # lineage 2 receives it
    assert strong.id in {m[0].id for m in tracker.migrants(1, 1)}  # and lineage 1
    # Lineage 2 then proposes the very same kernel itself: same id, its own lineage.
    found = strong.derive(lineage=2, origin=Origin(role="tuner"))
    assert found.id == strong.id
    record = tracker.record(2, 2, found, _ok(found, 4.368))
    assert record.lineage_best == pytest.approx(4.368)
    summary = tracker.close("done")
    by_summary = {i: e.speedup for i, (_, e) in summary.lineage_best.items()}
    # lineage 1 received the 4.368 kernel but never recorded it: its own best stands
    assert by_summary == {0: pytest.approx(4.368), 1: pytest.approx(1.5),
                          2: pytest.approx(4.368)}
    assert _last_lineage_best(tmp_path) == by_summary

    result = SwarmResult(summary=summary, start=None, utilisation={}, sink_errors=[],
                         locations=[], lineages=[LineageResult(i, 2, "done", 9.9)
                                                 for i in (0, 1, 2)])
    write_outputs(tmp_path, result, TimingSettings(flush_cache=False))
    doc = json.loads((tmp_path / "summary.json").read_text())
    # the lineage actor's own figure (9.9 here, which counts adopted kernels) is not reported
    assert {r["lineage"]: r["best_speedup"] for r in doc["lineages"]} == by_summary
    assert doc["timing"]["flush_cache"] is False and doc["timing"]["regime"].startswith("warm")


def test_a_resumed_run_summary_covers_the_whole_run(tmp_path):
    tracker = Tracker(_run(tmp_path), [ParquetSink()])
    first = _candidate("a", 0)
    tracker.record(0, 1, first, _ok(first, 2.0))
    twin = _candidate("b", 0)
    reused = tracker.lookup_binary(twin.id, "")  # no binary: nothing reused
    assert reused is None
    # a reused verdict (same binary) is recorded as such
    object.__setattr__(first, "lineage", 0)
    tracker.archive.binaries["bin"] = first.id
    reused = tracker.lookup_binary(twin.id, "bin")
    tracker.record(0, 2, twin, reused)
    time.sleep(0.05)
    history = tracker.records[:]
    wall_before = history[-1].wall_s
    tracker.close("stopped")

    from kernelswarm.experiments.run.resume import restore_records
    from kernelswarm.search import Task

    class _Task:  # restore_records needs the task's kernel entry and spec only
        def kernel(self, language):
            return type("K", (), {"entry": "f", "spec": {}})()

    restored = restore_records(tmp_path, _Task())  # type: ignore[arg-type]
    assert [r.candidate.id for r in restored] == [r.candidate.id for r in history]
    resumed = Tracker(_run(tmp_path), [ParquetSink()], history=restored)
    third = _candidate("c", 1)
    record = resumed.record(1, 1, third, _ok(third, 1.2))
    summary = resumed.close("done")
    assert summary.records == 3 and record.seq == 2
    assert summary.reused == 1  # the reused verdict before the stop is still counted
    assert summary.wall_s >= wall_before and record.wall_s >= wall_before
    assert {i: e.speedup for i, (_, e) in summary.lineage_best.items()} == {
        0: pytest.approx(2.0), 1: pytest.approx(1.2)}
    assert not math.isnan(summary.wall_s) and Task is not None


def test_a_gain_inside_the_noise_is_not_an_improvement():
    from kernelswarm.search.evaluation import clearly_faster

    a, b = _candidate("a", 0), _candidate("b", 0)
    incumbent = _ok(a, 2.00, spread=0.2)
    assert not clearly_faster(_ok(b, 2.02, spread=0.2), incumbent)
    assert clearly_faster(_ok(b, 2.40, spread=0.2), incumbent)
    assert clearly_faster(_ok(b, 2.02), _ok(a, 2.00))  # no spread known: any gain counts


def test_a_run_written_before_the_baseline_columns_still_reads(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kernelswarm.experiments.run.resume import restore_records
    from kernelswarm.experiments.sinks.parquet import SCHEMA, evaluation_rows
    from kernelswarm.search import Record

    candidate = _candidate("old", 0)
    record = Record(seq=0, lineage=0, step=1, candidate=candidate,
                    evaluation=_ok(candidate, 2.0), lineage_best=2.0, global_best=2.0,
                    wall_s=1.0, timestamp=0.0)
    old_fields = [f for f in SCHEMA if f.name not in (
        "best_baseline", "speedup_vs_best", "speedup_vs_best_ci", "compile_time_us",
        "start_spread_us", "eager_spread_us", "compile_spread_us", "best_baseline_us",
        "best_baseline_spread_us", "speedup_vs_start_ci", "speedup_vs_eager_ci",
        "speedup_vs_compile_ci")]
    rows = [{f.name: row[f.name] for f in old_fields} for row in evaluation_rows("r", record)]
    (tmp_path / "evaluations").mkdir()
    (tmp_path / "candidates").mkdir()
    pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema(old_fields)),
                   tmp_path / "evaluations" / "part-00000000.parquet")
    (tmp_path / "candidates" / f"{candidate.id}.cpp").write_text(candidate.source)
    row = read_evaluations(tmp_path).to_pylist()[0]
    assert row["best_baseline"] is None and row["speedup_vs_best"] is None

    class _Task:
        def kernel(self, language):
            return type("K", (), {"entry": "f", "spec": {}})()

    (restored,) = restore_records(tmp_path, _Task())  # type: ignore[arg-type]
    shape = restored.evaluation.shapes[0]
    assert shape.best_baseline == "" and math.isnan(shape.speedup_vs_best)
    assert restored.evaluation.speedup == pytest.approx(2.0)


def test_the_closing_table_names_the_best_baseline_and_marks_noise(tmp_path):
    import io
    from dataclasses import replace

    from rich.console import Console

    from kernelswarm.experiments.views.progress import closing_table

    tracker = Tracker(_run(tmp_path), [])
    tie, win = _candidate("tie", 0), _candidate("win", 1)

    def against(candidate, baseline_us, name):
        evaluation = _ok(candidate, 2.0, spread=0.05)
        shape = replace(evaluation.shapes[0], best_baseline=name, best_baseline_us=baseline_us,
                        speedup_vs_best=baseline_us / evaluation.shapes[0].time_us,
                        speedup_vs_best_ci=0.03)
        return replace(evaluation, shapes=(shape,))

    tracker.record(0, 1, tie, against(tie, 5.1, "compile"))  # 1.02x ±0.03: a tie
    tracker.record(1, 1, win, against(win, 7.5, "liger"))  # 1.50x ±0.03: a win
    summary = tracker.close("done")
    result = SwarmResult(summary=summary, start=None, utilisation={}, sink_errors=[],
                         locations=[], lineages=[LineageResult(i, 1, "done", 0.0) for i in (0, 1)])
    console = Console(file=io.StringIO(), width=200)
    console.print(closing_table(result, TimingSettings(flush_cache=False).regime))
    text = console.file.getvalue()
    assert "timed with a warm cache (not flushed)" in text
    lines = {line.split("│")[1].strip(): line for line in text.splitlines() if "│" in line}
    assert "1.020x ±0.030 ≈ (compile)" in lines["0"]
    assert "1.500x ±0.030 (liger)" in lines["1"] and "≈" not in lines["1"]
