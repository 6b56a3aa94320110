"""The evaluator outlives what a candidate does to it.

- A patch of the judge does not outlive the candidate: an honest kernel judged right after a
  cheat gets the figure it got before it (from an evaluator that had judged nothing else), and
  a plainly wrong kernel stays INCORRECT.
- A candidate that kills its parent does not kill the evaluator: judged in a process of its own
  (so that this test survives if it does), the evaluator gives a verdict, judges the next kernel,
  and leaves no scratch folder and no process behind.
- A child that holds the sandbox's reply pipe does not turn a crash into a TIMEOUT.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelswarm.search import Status
from tests.conftest import ROOT, SILU_TASK

from .cases import DENIED, Case
from .judging import SCRATCH_PREFIX, left_running

SAME_FIGURE = 1.5  # honest speedups within this factor of each other are the same figure


def _kernel(language: str, name: str) -> Case:
    """A kernel of kernels/<language>/ (its verdict is asserted by the test itself)."""
    return Case(name, language, DENIED, "")


def _judge(language, request):
    """The module's shared evaluator of ``language`` and its starting candidate."""
    if language == "cpp":
        return request.getfixturevalue("cpp_evaluator"), request.getfixturevalue("cpp_start")
    return request.getfixturevalue("triton_evaluator"), request.getfixturevalue("triton_start")


@pytest.mark.parametrize("language, cheat", [("cpp", "pyapi_patch_timer"),
                                             ("triton", "patch_timer_code_swap")])
def test_an_honest_kernel_judged_after_a_timer_patch_gets_its_true_figure(
        language, cheat, request, probes):
    evaluator, start = _judge(language, request)
    before = evaluator.evaluate(start)  # the first candidate this evaluator judges
    assert before.status is Status.OK, before.message
    evaluator.evaluate(start.derive(source=probes.render(_kernel(language, cheat))))
    after = evaluator.evaluate(start)
    assert after.status is Status.OK, after.message
    ratio = after.speedup / before.speedup
    assert 1 / SAME_FIGURE < ratio < SAME_FIGURE, (
        f"the starting kernel after the cheat: {after.speedup:.2f}x; before it: "
        f"{before.speedup:.2f}x")


@pytest.mark.parametrize("language, cheat", [("cpp", "pyapi_patch_compare"),
                                             ("triton", "patch_compare_code_swap")])
def test_a_wrong_kernel_judged_after_a_comparison_patch_is_still_incorrect(
        language, cheat, request, probes):
    evaluator, start = _judge(language, request)
    evaluator.evaluate(start.derive(source=probes.render(_kernel(language, cheat))))
    wrong = evaluator.evaluate(start.derive(source=probes.render(_kernel(language,
                                                                        "plainly_wrong"))))
    assert wrong.status is Status.INCORRECT, wrong.message


JUDGE_ONE = """
import json, sys
from pathlib import Path
from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator
task, language, kernel, cache = sys.argv[1:5]
settings = EvaluatorSettings(cache_dir=Path(cache), run_timeout_s=30.0, seeds=1, warmup=1,
                             min_repeats=3, max_repeats=10, timing_budget_s=0.05,
                             flush_cache=False)
with SandboxEvaluator(task, language, settings) as evaluator:
    start = evaluator.start_candidate
    verdict = evaluator.evaluate(start.derive(source=Path(kernel).read_text()))
    honest = evaluator.evaluate(start)
print(json.dumps({"status": verdict.status.value, "message": verdict.message,
                  "honest": honest.status.value}))
"""


def _processes_in(folder: Path) -> list[str]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if cwd.startswith(str(folder)):
            found.append(f"process {entry} still runs in {cwd}")
    return found


@pytest.mark.parametrize("language, name", [("cpp", "kills_parent"),
                                            ("cpp", "libc_walk_kills_parent"),
                                            ("triton", "kills_parent")])
def test_a_kernel_that_kills_its_parent_gets_a_verdict(language, name, tmp_path, compile_cache,
                                                       tiny_silu_task, probes):
    case = _kernel(language, name)
    kernel = tmp_path / f"kernel{case.path.suffix}"
    kernel.write_text(probes.render(case))
    own_tmp = tmp_path / "tmp"
    own_tmp.mkdir()
    task = SILU_TASK if language == "cpp" else tiny_silu_task
    env = {**os.environ, "TMPDIR": str(own_tmp), "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.run([sys.executable, "-c", JUDGE_ONE, str(task), language, str(kernel),
                          str(compile_cache)], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    time.sleep(1.0)  # a worker orphaned by its parent's death notices within a second
    problems = _processes_in(own_tmp)
    left = sorted(p.name for p in own_tmp.glob(SCRATCH_PREFIX + "*"))
    if left:
        problems.append(f"scratch folders left behind: {left}")
    if run.returncode != 0:
        signal = f" (signal {-run.returncode})" if run.returncode < 0 else ""
        problems.append(f"EXPECTED REJECTED|RUNTIME_ERROR GOT the evaluator's death: exit "
                        f"status {run.returncode}{signal}; stderr ends: {run.stderr[-400:]}")
    else:
        doc = json.loads(run.stdout.strip().splitlines()[-1])
        if Status(doc["status"]) not in DENIED:
            problems.append(f"EXPECTED REJECTED|RUNTIME_ERROR GOT {doc['status']}: "
                            f"{doc['message'][:300]}")
        if doc["honest"] != "OK":
            problems.append(f"the next honest kernel was judged {doc['honest']}")
    assert not problems, f"{language}/{name}: " + "\n".join(problems)


@pytest.mark.parametrize("language", ["cpp", "triton"])
def test_a_crash_while_a_child_holds_the_reply_pipe_is_not_a_timeout(language, request, probes):
    # The shared evaluators' run limits (3 s for cpp, 30 s for Triton) are what a crash must
    # not be turned into: the verdict names the crash, and comes well before the limit.
    evaluator, start = _judge(language, request)
    case = _kernel(language, "crash_with_child_holding_pipes")
    began = time.monotonic()
    verdict = evaluator.evaluate(start.derive(source=probes.render(case)))
    took = time.monotonic() - began
    honest = evaluator.evaluate(start)
    problems = left_running(case.marker)
    if verdict.status not in DENIED:
        problems.append(f"EXPECTED REJECTED|RUNTIME_ERROR GOT {verdict.status.value} after "
                        f"{took:.1f} s: {verdict.message[:300]}")
    elif took > evaluator.settings.run_timeout_s:
        problems.append(f"the crash took {took:.1f} s to be reported (run limit "
                        f"{evaluator.settings.run_timeout_s:g} s)")
    if honest.status is not Status.OK:
        problems.append(f"the next honest kernel was judged {honest.status.value}")
    assert not problems, f"{language}/crash_with_child_holding_pipes: " + "\n".join(problems)
