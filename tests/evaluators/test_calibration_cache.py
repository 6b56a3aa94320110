"""The calibration kept on disk: a second evaluator of the same task, language, device and
settings reads it instead of measuring; a damaged entry is measured again; another setting or
``KERNELSWARM_CALIBRATION_CACHE=0`` is a calibration of its own."""

from __future__ import annotations

import json

from kernelswarm.evaluators import SandboxEvaluator
from kernelswarm.evaluators.judge.calibration_cache import CALIBRATION_ENV, calibration_path
from kernelswarm.search import Status, load_task
from tests.conftest import SILU_TASK
from tests.evaluators.kernel_library import quick_settings


def _first_evaluation(settings):
    with SandboxEvaluator(SILU_TASK, "cpp", settings) as evaluator:
        return evaluator.evaluate(evaluator.start_candidate)


def test_a_second_evaluator_reads_the_calibration_and_a_damaged_one_is_measured_again(tmp_path):
    settings = quick_settings(tmp_path)
    first = _first_evaluation(settings)
    assert first.status is Status.OK, first.message
    assert first.metrics["calibration"] == "measured"
    kept = list((tmp_path / "calibration").glob("silu_and_mul-cpp-*.json"))
    assert len(kept) == 1
    doc = json.loads(kept[0].read_text())
    assert set(doc["clean"]) == {s.label for s in load_task(SILU_TASK).tuning_shapes}

    second = _first_evaluation(settings)
    assert second.status is Status.OK, second.message
    assert second.metrics["calibration"] == "read from the cache"
    # the figures a candidate is judged against are the ones kept
    assert second.machine == first.machine
    assert json.loads(kept[0].read_text()) == doc

    kept[0].write_text('{"machine": ')  # cut short, as by a full disk
    third = _first_evaluation(settings)
    assert third.status is Status.OK, third.message
    assert third.metrics["calibration"] == "measured"
    assert json.loads(kept[0].read_text())["clean"].keys() == doc["clean"].keys()


def test_the_key_follows_the_settings_and_the_switch_turns_the_cache_off(tmp_path, monkeypatch):
    task = load_task(SILU_TASK)
    start = task.starting_candidate("cpp")
    path = calibration_path(task, "cpp", start.id, quick_settings(tmp_path))
    assert path is not None and path.parent == tmp_path / "calibration"
    assert calibration_path(task, "cpp", start.id, quick_settings(tmp_path)) == path
    for other in (quick_settings(tmp_path, seeds=3), quick_settings(tmp_path, flush_cache=True),
                  quick_settings(tmp_path, extra_checks=({"shape": {"tokens": 1, "d": 8,
                                                                    "dtype": "float32"}},))):
        assert calibration_path(task, "cpp", start.id, other) != path
    assert calibration_path(task, "triton", start.id, quick_settings(tmp_path)) != path
    monkeypatch.setenv(CALIBRATION_ENV, "0")
    assert calibration_path(task, "cpp", start.id, quick_settings(tmp_path)) is None


_PREPARE = """
import sys, time
from pathlib import Path
from kernelswarm.evaluators import SandboxEvaluator
from tests.conftest import SILU_TASK
from tests.evaluators.kernel_library import quick_settings

go = Path(sys.argv[2])
while not go.exists():
    time.sleep(0.01)
with SandboxEvaluator(SILU_TASK, "cpp", quick_settings(Path(sys.argv[1]))) as evaluator:
    print("PREPARED", evaluator.prepare()["calibration"])
"""


def test_evaluators_starting_together_measure_the_calibration_once(tmp_path):
    # Two processes (two workers of a pool, say) get ready for the same task at the same moment
    # with an empty cache: one measures, the other waits for it and reads what it kept.
    import os
    import subprocess
    import sys
    from pathlib import Path

    go = tmp_path / "go"
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root.parent), str(root),
                                                         os.environ.get("PYTHONPATH", "")])}
    processes = [subprocess.Popen([sys.executable, "-c", _PREPARE, str(tmp_path), str(go)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  cwd=root, env=env) for _ in range(2)]
    go.touch()
    outcomes = []
    for process in processes:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-3000:]
        outcomes += [line.split(" ", 1)[1] for line in out.splitlines()
                     if line.startswith("PREPARED ")]
    assert sorted(outcomes) == ["measured", "read from the cache"]
    assert len(list((tmp_path / "calibration").glob("silu_and_mul-cpp-*.json"))) == 1
    assert len(list((tmp_path / "baselines").glob("silu_and_mul-*.json"))) == 1


def test_a_clean_figure_far_off_is_measured_again_not_held_against_the_candidate(tmp_path):
    # A calibration measured while the machine was busy keeps a clean figure far from what the
    # starting kernel takes now (a clean burst of 5238 us per call against 295 us, seen on a
    # loaded 2-core machine). The canary then finds the starting kernel "not itself" beside any
    # candidate; the figures are timed again in a runner without candidate code, and the
    # candidate is judged against those.
    settings = quick_settings(tmp_path)
    first = _first_evaluation(settings)
    assert first.status is Status.OK, first.message
    (kept,) = (tmp_path / "calibration").glob("silu_and_mul-cpp-*.json")
    doc = json.loads(kept.read_text())
    label = next(iter(doc["clean"]))
    honest = doc["clean"][label]["burst_us"]
    doc["clean"][label]["burst_us"] = spiked = 20 * honest + 1000.0
    kept.write_text(json.dumps(doc))

    with SandboxEvaluator(SILU_TASK, "cpp", settings) as evaluator:
        judged = evaluator.evaluate(evaluator.start_candidate)
        assert judged.status is Status.OK, judged.message
        again = judged.metrics["clean_remeasured"][label]
        assert again["burst_us_before"] == spiked
        assert again["burst_us_now"] < spiked / 3
        # the figures measured again hold for the evaluator's next candidates
        assert evaluator.evaluate(evaluator.start_candidate).status is Status.OK
    # the cache keeps the calibration's figures
    assert json.loads(kept.read_text())["clean"][label]["burst_us"] == spiked
