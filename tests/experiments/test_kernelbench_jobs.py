"""The KernelBench benchmark's problems as processes: a hang is killed at its limit with the
stage it was in, a crash is a row with its log, rows are appended as problems end and a cut
line is skipped, slots follow the visible GPUs, and --resume keeps what an earlier run did."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from benchmarks.kernelbench import main
from kernelswarm.experiments.kernelbench.jobs import ResultsFile, Slot, run_jobs, slots
from tests.experiments.test_kernelbench import RELU

# Each problem's "process" is a real Python process doing what the problem's name says.
SCRIPT = r'''
import json, os, sys, time
problem, result = sys.argv[1], sys.argv[2]
open(result + ".stage", "w").write("step of " + problem)
if problem == "hang":
    open(result + ".pid", "w").write(str(os.getpid()))
    time.sleep(600)
elif problem == "crash":
    print("the model ran out of memory", flush=True)
    sys.exit(3)
else:
    json.dump({"problem": problem, "status": "ok", "speedup_vs_eager": 1.5}, open(result, "w"))
'''


def _command(tmp_path: Path):
    script = tmp_path / "problem.py"
    script.write_text(SCRIPT)
    return lambda problem, result: [sys.executable, str(script), problem, str(result)]


def test_a_hang_is_killed_at_its_limit_and_a_crash_keeps_its_log(tmp_path):
    results = ResultsFile(tmp_path / "results.jsonl")
    seen = []
    began = time.monotonic()
    run_jobs(["hang", "crash", "fine"], _command(tmp_path), [Slot("a"), Slot("b")], 3.0,
             tmp_path, results, seen.append)
    assert time.monotonic() - began < 30
    rows = results.rows()
    assert [r["problem"] for r in seen] == list(rows) and set(rows) == {"hang", "crash", "fine"}
    assert rows["hang"]["status"] == "time limit: still running after 3 s (step of hang)"
    pid = int((tmp_path / "rows" / "hang.json.pid").read_text())
    with pytest.raises(ProcessLookupError):  # killed with its process group, not left behind
        os.kill(pid, 0)
    assert rows["crash"]["status"] == ("its process ended without a result (exit status 3): "
                                       "the model ran out of memory")
    assert rows["fine"]["status"] == "ok" and rows["fine"]["speedup_vs_eager"] == 1.5
    assert {r["slot"] for r in rows.values()} <= {"a", "b"}
    assert all(r["wall_s"] >= 0 for r in rows.values())


def test_results_are_appended_and_a_line_cut_by_a_kill_is_skipped(tmp_path):
    results = ResultsFile(tmp_path / "results.jsonl")
    results.append({"problem": "1_A", "status": "ok"})
    results.append({"problem": "2_B", "status": "no starting kernel"})
    with results.path.open("a") as handle:
        handle.write('{"problem": "3_C", "sta')  # the run was killed mid-write
    assert list(results.rows()) == ["1_A", "2_B"]
    results.append({"problem": "1_A", "status": "time limit"})  # a later line replaces
    assert results.rows()["1_A"]["status"] == "time limit"


def test_one_slot_per_visible_gpu(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    assert [(s.name, s.env["CUDA_VISIBLE_DEVICES"]) for s in slots("cuda", None)] == [
        ("gpu 2", "2"), ("gpu 5", "5")]
    assert [s.name for s in slots("cuda", 1)] == ["gpu 2"]
    assert [s.name for s in slots("cpu", 3)] == ["worker 0", "worker 1", "worker 2"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(ValueError, match="no GPU is visible"):
        slots("cuda", None)


def test_resume_keeps_the_rows_of_an_earlier_run_and_refuses_to_mix_without_it(tmp_path, capsys):
    level = tmp_path / "kb" / "level1"
    level.mkdir(parents=True)
    for name in ("1_ReLU.py", "2_ReLU.py"):
        (level / name).write_text(RELU)
    out = tmp_path / "out"
    ResultsFile(out / "results.jsonl").append(
        {"problem": "1_ReLU", "status": "ok", "speedup_vs_eager": 2.0,
         "speedup_vs_compile": None, "evaluations": 7, "start": "given", "wall_s": 12.0})
    argv = ["--kernelbench", str(tmp_path / "kb"), "--level", "1", "--starts", str(tmp_path),
            "--language", "cpp", "--device", "cpu", "--out", str(out),
            "--json", str(tmp_path / "report.json")]
    with pytest.raises(SystemExit, match="give --resume"):
        main(argv)
    # 2_ReLU has no start in --starts: its process says so quickly; 1_ReLU is not run again
    assert main([*argv, "--resume"]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    rows = {r["problem"]: r for r in report["problems"]}
    assert rows["1_ReLU"]["evaluations"] == 7 and rows["1_ReLU"]["speedup_vs_eager"] == 2.0
    assert rows["2_ReLU"]["status"] == "no starting kernel (2_ReLU.cpp not in --starts)"
    assert report["summary"]["correct"] == 1 and not report["stopped"]
    assert set(ResultsFile(out / "results.jsonl").rows()) == {"1_ReLU", "2_ReLU"}
    printed = capsys.readouterr().out
    assert "1 already done or not imported, 1 to run" in printed
    assert "| 1_ReLU | given | ok | 2.00x |" in printed
