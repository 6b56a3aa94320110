"""Restoring a run's records from its folder: exact, or refused with a reason."""

from __future__ import annotations

import math

import pytest

from kernelswarm.experiments.commands.cli import main
from kernelswarm.experiments.run.resume import ResumeError, restore_records
from kernelswarm.experiments.sinks import ParquetSink
from kernelswarm.search import Evaluation, Origin, RunInfo, ShapeResult, Status, Tracker, load_task
from tests.conftest import SILU_TASK


def _write_run(run_dir):
    task = load_task(SILU_TASK)
    start = task.starting_candidate("cpp")
    tuned = start.derive(source=start.source + "\n// tuned\n", knob_space={"KS_UNROLL": (1, 2, 4)},
                         knobs={"KS_UNROLL": 2}, lineage=0,
                         origin=Origin(role="coder", move="rewrite:unroll", rationale="why not"))
    broken = tuned.derive(source="int broken(", lineage=1, origin=Origin(role="coder"))
    ok = Evaluation(tuned.id, Status.OK, "fine", shapes=(
        ShapeResult("d=8,dtype=float32,tokens=1", 0.0, 0.0, True, 2.0, 0.1, 10, 4.0, 3.0, 2.0,
                    1.5),), compile_s=0.2, eval_s=1.0, device="cpu: test")
    tracker = Tracker(RunInfo("r", "t", run_dir, "silu_and_mul", "cpp", 2), [ParquetSink()])
    tracker.record(-1, 0, start, Evaluation(start.id, Status.OK, "start"))
    tracker.record(0, 1, tuned, ok)
    tracker.record(1, 1, broken, Evaluation(broken.id, Status.COMPILE_ERROR, "error: line 1"))
    tracker.close("stopped")
    return task, [start, tuned, broken], ok


def test_records_come_back_as_they_were_written(tmp_path):
    task, candidates, ok = _write_run(tmp_path)
    records = restore_records(tmp_path, task)
    assert [r.seq for r in records] == [0, 1, 2]
    assert [r.candidate for r in records] == candidates
    restored = records[1].evaluation
    assert restored.status is Status.OK and restored.speedup == pytest.approx(ok.speedup)
    assert restored.shapes[0].time_us == 2.0 and math.isnan(restored.shapes[0].speedup_vs_compile)
    assert records[2].evaluation.status is Status.COMPILE_ERROR
    assert records[2].evaluation.shapes == ()


def test_a_missing_or_edited_source_is_refused(tmp_path):
    task, candidates, _ = _write_run(tmp_path)
    source = tmp_path / "candidates" / f"{candidates[1].id}.cpp"
    source.write_text(source.read_text() + "// edited")
    with pytest.raises(ResumeError, match="no longer hash to its id"):
        restore_records(tmp_path, task)
    source.unlink()
    with pytest.raises(ResumeError, match="is missing"):
        restore_records(tmp_path, task)


def test_a_folder_that_is_not_a_run(tmp_path, capsys):
    with pytest.raises(ResumeError, match="does not exist"):
        restore_records(tmp_path, load_task(SILU_TASK))
    assert main(["run", "--resume", str(tmp_path)]) == 2
    assert "not a kernelswarm run folder" in capsys.readouterr().out
    assert main(["run", "quick.toml", "--resume", str(tmp_path)]) == 2


def test_typed_figures_and_a_record_written_the_old_way_come_back(tmp_path):
    # ``old`` carries its figures in resources/metrics as runs before the typed fields wrote
    # them; ``new`` in the fields: both are stored alike and read back into the fields
    from dataclasses import replace

    from kernelswarm.search.stored_form import typed_detail
    from tests.search.old_records import OLD_METRICS, OLD_RESOURCES

    task = load_task(SILU_TASK)
    start = task.starting_candidate("cpp")
    shape = ShapeResult("d=8,dtype=float32,tokens=1", correct=True, time_us=2.0)
    old = Evaluation(start.id, Status.OK, "start", shapes=(shape,), resources=OLD_RESOURCES,
                     metrics=OLD_METRICS)
    tuned = start.derive(source=start.source + "\n// tuned\n", lineage=0,
                         origin=Origin(role="coder"))
    new = Evaluation(tuned.id, Status.OK, "fine", shapes=(shape,),
                     **typed_detail(OLD_RESOURCES, OLD_METRICS))
    assert new.machine is not None and "copy_bandwidth_gbs" not in new.metrics
    tracker = Tracker(RunInfo("r", "t", tmp_path, "silu_and_mul", "cpp", 1), [ParquetSink()])
    tracker.record(-1, 0, start, old)
    tracker.record(0, 1, tuned, new)
    tracker.close("stopped")
    restored = [replace(r.evaluation, shapes=()) for r in restore_records(tmp_path, task)]
    new = replace(new, shapes=())  # NaN figures: compared by the tests above
    assert restored[0] == replace(new, candidate_id=start.id, message="start")
    assert restored[1] == new
    assert restored[1].profile.ncu[0].dram_throughput_pct == 81.0
    assert restored[1].kernel_resources[0].registers == 32
