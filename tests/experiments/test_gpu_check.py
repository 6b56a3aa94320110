"""The GPU check's parts that need no GPU: which test files it deals out, how it counts a test
file's results, what it says where there is no GPU, and the search's throughput it reports."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from benchmarks import gpu_check, gpu_regressions
from benchmarks.search_gpu import throughput
from tests.conftest import ROOT


def test_it_finds_every_gpu_marked_test_file_heaviest_first():
    found = gpu_check.gpu_test_files(ROOT / "tests")
    names = [str(path.relative_to(ROOT)) for _, path in found]
    assert "tests/evaluators/gpu/test_cuda_gpu.py" in names
    assert "tests/evaluators/adversarial/test_gpu.py" in names
    assert "tests/evaluators/test_verdicts.py" not in names  # no GPU mark there
    weights = [weight for weight, _ in found]
    assert weights == sorted(weights, reverse=True)
    # parametrised cases count: the adversarial file's 8 cases outweigh its 2 functions
    assert dict((str(p.relative_to(ROOT)), w) for w, p in found)[
        "tests/evaluators/adversarial/test_gpu.py"] >= 8


def test_a_test_files_results_are_counted_from_its_junit_report(tmp_path):
    (tmp_path / "test_three.py").write_text(
        "import pytest\n"
        "def test_passes(): pass\n"
        "def test_fails(): assert False\n"
        "@pytest.mark.skip(reason='no')\n"
        "def test_skipped(): pass\n")
    report = tmp_path / "junit.xml"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           f"--junitxml={report}", "test_three.py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert gpu_check._junit(report) == {"passed": 1, "failed": 1, "errors": 0, "skipped": 1}
    assert gpu_check._junit(tmp_path / "missing.xml") == {}


def test_without_a_gpu_it_says_so_and_fails(tmp_path, capsys):
    if gpu_check._gpu_count():
        return  # a GPU machine: the check itself is what runs there
    assert gpu_check.main(["--out", str(tmp_path / "out")]) == 1
    assert "no GPU visible" in capsys.readouterr().err


def test_a_searchs_throughput_counts_its_records_and_the_phases_of_each(small_run):
    outcome, _, _ = small_run
    found = throughput(outcome.run_dir)
    assert found["evaluations"] >= 2
    assert found["span_s"] > 0
    assert abs(found["evals_per_gpu_minute"] - found["evaluations"] / (found["span_s"] / 60)) \
        < 1e-9
    assert sum(found["statuses"].values()) == found["evaluations"]
    assert {"correctness", "timing", "request.call"} <= set(found["median_phase_s"])
    # what the search itself judged: after the start's verdict, per language
    after = found["after_start"]
    assert after["evaluations"] == found["evaluations"] - 1  # one starting kernel
    assert 0 < after["span_s"] < found["span_s"]
    assert sum(after["languages"].values()) == after["evaluations"]
    assert found["build_wait_s"] >= 0.0
    # the first candidate judged after the start, counted from the start's verdict
    assert 0 < after["first_candidate_after_s"] <= after["span_s"]


def _check(silu_s: float, warm_s: float, triton_s: float) -> dict:
    return {"commit": "abc1234", "eval_cost_median_s": {"silu_and_mul": silu_s},
            "eval_cost_phases_s": {"silu_and_mul": {"request.time.warm": warm_s,
                                                    "runner_wait": 0.01}},
            "eval_cost_by_language": {"triton": {"silu_and_mul": {
                "median_s": triton_s, "phases_s": {"correctness": 0.8}}}}}


def test_a_figure_of_judging_that_got_slower_is_named(tmp_path):
    # the regression nothing showed for two days: eval_cost 0.98 -> 2.98 s, warm-up 0.15 -> 2.2
    before, now = _check(0.977, 0.151, 2.1), _check(2.98, 2.18, 2.2)
    now["eval_cost_phases_s"]["silu_and_mul"]["runner_wait"] = 0.04  # 4x, but under the floor
    found = gpu_regressions.regressions(before, now)
    assert [(r.task, r.language, r.figure) for r in found] == [
        ("silu_and_mul", "cuda", "eval"), ("silu_and_mul", "cuda", "request.time.warm")]
    assert found[0].ratio == pytest.approx(2.98 / 0.977)
    path = tmp_path / "gpu-check-20261127.json"
    path.write_text(json.dumps(before))
    _, text = gpu_regressions.report(path, now)
    assert "SLOWER silu_and_mul (cuda) eval: 0.977 s -> 2.980 s (3.05x)" in text
    assert "abc1234" in text
    # within 20% (the triton evaluation: 2.1 -> 2.2 s) is not named; nothing slower, said so
    assert gpu_regressions.regressions(before, before) == []
    assert "no figure more than 1.2x slower" in gpu_regressions.report(path, before)[1]


def test_the_newest_committed_check_is_the_one_compared_with(tmp_path):
    for name in ("gpu-check-20261127.json", "gpu-check-20261129.json",
                 "gpu-check-20261128-x2.json", "notes.json"):
        (tmp_path / name).write_text("{}")
    newest = gpu_regressions.latest_check(tmp_path)
    assert newest is not None and newest.name == "gpu-check-20261129.json"
    assert gpu_regressions.latest_check(tmp_path, exclude=newest).name == \
        "gpu-check-20261128-x2.json"
    assert gpu_regressions.latest_check(tmp_path / "missing") is None


def test_a_resumed_check_keeps_what_was_measured_and_skips_the_steps_done(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = gpu_check.Check(tmp_path / "a", 1, 60.0)
    first.summary["steps"] = [{"name": "eval_cost silu_and_mul", "gpu": 0, "rc": 0,
                               "wall_s": 30.0},
                              {"name": "search_gpu silu_and_mul", "gpu": 0, "rc": "timeout",
                               "wall_s": 90.0}]
    first.eval_cost("silu_and_mul", "cuda", {"median_s_after_first": 1.04, "first_s": 7.1,
                                             "phase_median_s": {"timing": 0.42},
                                             "build_wait_s": 0.0})
    first.eval_cost("silu_and_mul", "triton", {"median_s_after_first": 2.1, "first_s": 12.0,
                                               "build_wait_s": 0.3})
    second = gpu_check.Check(tmp_path / "b", 1, 60.0)
    second.resume(tmp_path / "a" / "gpu-check.json")
    assert second.done("eval_cost silu_and_mul")
    assert not second.done("search_gpu silu_and_mul")  # it timed out: run it again
    assert second.summary["eval_cost_median_s"] == {"silu_and_mul": 1.04}
    assert second.summary["eval_cost_by_language"]["triton"]["silu_and_mul"]["median_s"] == 2.1
    assert second.summary["gpu_build_wait_s"]["total"] == pytest.approx(0.3)
    written = json.loads((tmp_path / "b" / "gpu-check.json").read_text())
    assert written["resumed_from"][0]["steps"] == 2
