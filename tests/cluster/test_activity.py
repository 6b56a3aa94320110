"""What a pool's activity says about its workers: busy fractions by minute, evaluations a
minute, calibrations, GPUs shared (cluster/activity.py), from intervals written out by hand."""

from __future__ import annotations

import json

import pytest

from kernelswarm.cluster.activity import (
    activity_line,
    busy_by_minute,
    summarise_activity,
    write_activity,
)


def _interval(worker, began, ended, kind="evaluate", calibration=""):
    return {"worker": worker, "cell": "c", "kind": kind, "began": began, "ended": ended,
            "outcome": "OK", "calibration": calibration}


def _activity(intervals, gpus=("GPU-a", "GPU-b")):
    return {"started": 1000.0, "worker_deaths": 0, "intervals": intervals,
            "workers": [{"pid": i, "gpu_uuid": g} for i, g in enumerate(gpus)]}


def test_busy_by_minute_clips_intervals_to_each_minute():
    # worker 0 busy the whole first minute; worker 1 busy 30 s spanning the minute's edge
    intervals = [_interval(0, 0.0, 60.0), _interval(1, 45.0, 75.0)]
    shares = busy_by_minute(intervals, 2, 0.0, 120.0)
    assert shares == pytest.approx([(60 + 15) / 120, 15 / 120])
    # a last stretch under a tenth of a minute is left out; a longer one counts over its length
    assert len(busy_by_minute(intervals, 2, 0.0, 125.0)) == 2
    assert busy_by_minute(intervals, 2, 0.0, 90.0)[-1] == pytest.approx(15 / 60)


def test_summary_counts_evaluations_in_the_window_and_the_calibrations():
    intervals = [_interval(0, 1000.0, 1010.0, calibration="measured"),
                 _interval(1, 1010.0, 1015.0, "prepare", "read from the cache"),
                 *[_interval(w, 1015.0 + 2 * k, 1017.0 + 2 * k) for k in range(20) for w in (0, 1)]]
    summary = summarise_activity(_activity(intervals))
    assert summary["evaluations"] == 41 and summary["preparations"] == 1
    assert summary["calibrations"] == {"measured": 1, "read": 1}
    assert summary["window_s"] == pytest.approx(55.0)
    assert summary["evaluations_per_minute"] == pytest.approx(41 / 55 * 60)
    assert summary["busy"] == pytest.approx((10 + 5 + 80) / (2 * 55))
    assert summary["gpus"] == ["GPU-a", "GPU-b"] and summary["shared_gpus"] == []
    # a window that starts later drops what ended before it
    later = summarise_activity(_activity(intervals), since=1015.0, until=1055.0)
    assert later["evaluations"] == 40 and later["calibrations"] == {"measured": 0, "read": 0}
    line = activity_line(summary)
    assert "2 on 2 GPUs" in line and "41 evaluations" in line and "1 measured, 1 read" in line


def test_two_workers_on_one_gpu_are_named(tmp_path):
    activity = _activity([_interval(0, 1000.0, 1001.0)], gpus=("GPU-a", "GPU-a"))
    summary = write_activity(tmp_path, activity)
    assert summary["shared_gpus"] == ["GPU-a"]
    assert "SHARED GPUs: GPU-a" in activity_line(summary)
    kept = json.loads((tmp_path / "workers.json").read_text())
    assert kept["summary"] == summary and kept["intervals"] == activity["intervals"]


def test_a_gpu_the_driver_cannot_name_is_reported_unknown_not_fatal(monkeypatch):
    from kernelswarm.cluster import eval_worker

    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi: the worker still reports
    uuid, name = eval_worker._gpu_identity("0")
    assert uuid.startswith("unknown (") and name == ""
    summary = summarise_activity(_activity([_interval(0, 1000.0, 1001.0)], gpus=(uuid, uuid)))
    assert summary["gpus"] == [] and summary["shared_gpus"] == []
