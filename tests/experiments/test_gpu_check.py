"""The GPU check's parts that need no GPU: which test files it deals out, how it counts a test
file's results, what it says where there is no GPU, and the search's throughput it reports."""

from __future__ import annotations

import subprocess
import sys

from kernelswarm.experiments.benchmarks import gpu_check
from kernelswarm.experiments.benchmarks.search_gpu import throughput
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
