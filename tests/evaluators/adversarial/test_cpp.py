"""Adversarial cpp kernels, judged by one shared cpp evaluator (silu_and_mul, CPU shapes).

Each row is one kernel in kernels/cpp/ and the verdicts it may get; ``run_case`` also checks that
nothing was left running, connected, written or kept, and that the evaluator still judges the
starting kernel OK afterwards.
"""

from __future__ import annotations

import pytest

from kernelswarm.search import Status
from tests.conftest import SILU_TASK

from .cases import (
    DENIED,
    FORGERY,
    HONEST_COST_CEILING,
    INCORRECT,
    OK,
    REJECTED,
    WRONG_OR_REFUSED,
    Case,
)
from .judging import run_case

PYAPI = ("a library that imports the Python C API is refused before it loads (REJECTED, the "
         "symbol named); one that got in anyway could only patch its own process, away from the "
         "comparison, and its zeros are INCORRECT")
ESCAPE = ("refused before it runs (REJECTED: screen or imported symbols), or denied by the OS "
          "at run time, where the kernel aborts (RUNTIME_ERROR); OK would mean it got out")
OS_ONLY = ("the library names and imports nothing but memcpy and strcmp, so no screen or imports "
           "check sees it: the OS denies the call at run time and the kernel traps "
           "(RUNTIME_ERROR); REJECTED if something sees it anyway; OK would mean it got out")
SLOW_HONEST = ("the cheat is detected (INCORRECT for a skipped or stale timed output), or it "
               "never pays off and the kernel is judged at its honest, four-fold cost")

CASES = [
    Case("pyapi_patch_compare", "cpp", WRONG_OR_REFUSED, PYAPI),
    Case("pyapi_patch_timer", "cpp", REJECTED,
         "the Python C API import is refused (REJECTED); a timing loop patched in the "
         "candidate's process disagrees with the wall time measured outside (REJECTED); an "
         "unpatched one reports the honest four-fold cost", ok_below=HONEST_COST_CEILING),
    Case("pyapi_patch_reference", "cpp", WRONG_OR_REFUSED, PYAPI),
    Case("pyapi_found_by_walking_elf", "cpp", WRONG_OR_REFUSED,
         "no Python symbol is imported, so only the isolation of the verdict stops it: its "
         "zeros reach a comparison it cannot patch (INCORRECT); REJECTED if the walk is refused"),
    Case("forge_result_frame", "cpp", FORGERY,
         "a forged frame is not the verdict: the kernel's zeros are INCORRECT, or the frame is "
         "refused (REJECTED) or garbles the channel (RUNTIME_ERROR)"),
    Case("forge_then_hang", "cpp", frozenset({Status.TIMEOUT, Status.REJECTED,
                                                Status.RUNTIME_ERROR}),
         "a forged frame is not the verdict, so the endless loop after it is a TIMEOUT (or the "
         "forgery is refused, REJECTED, or garbles the channel, RUNTIME_ERROR)"),
    Case("memo_sample_hash", "cpp", INCORRECT, SLOW_HONEST, ok_below=HONEST_COST_CEILING),
    Case("memo_pointer_and_corners", "cpp", INCORRECT, SLOW_HONEST,
         ok_below=HONEST_COST_CEILING),
    Case("phase_by_call_count", "cpp", INCORRECT, SLOW_HONEST, ok_below=HONEST_COST_CEILING),
    Case("phase_by_call_cadence", "cpp", WRONG_OR_REFUSED,
         SLOW_HONEST + "; reading the time-stamp counter may be refused outright (REJECTED)",
         ok_below=HONEST_COST_CEILING),
    Case("thread_finishes_later", "cpp", frozenset({Status.REJECTED, Status.INCORRECT,
                                                      Status.RUNTIME_ERROR}),
         "a library importing thread calls is refused (REJECTED); a thread denied at run time "
         "throws (RUNTIME_ERROR); one that runs leaves outputs unwritten at the check "
         "(INCORRECT) or is caught by the wall-time cross-check (REJECTED)"),
    Case("raw_clone_thread", "cpp", frozenset({Status.REJECTED, Status.INCORRECT,
                                                 Status.RUNTIME_ERROR}),
         "clone is a process call: refused by the imports check (REJECTED) or by seccomp, "
         "where the kernel aborts (RUNTIME_ERROR); a thread that runs leaves outputs unwritten "
         "at the check (INCORRECT)"),
    Case("fork_orphan", "cpp", DENIED, ESCAPE),
    Case("exec_through_typedef", "cpp", DENIED, ESCAPE),
    Case("shell_through_pointer", "cpp", DENIED, ESCAPE),
    Case("popen_shell", "cpp", DENIED, ESCAPE),
    Case("socket_loopback", "cpp", DENIED, ESCAPE),
    Case("write_outside_file", "cpp", DENIED, ESCAPE),
    Case("read_outside_file", "cpp", DENIED, ESCAPE),
    Case("read_parent_proc", "cpp", DENIED,
         ESCAPE + "; in a PID namespace the parent is not visible at all"),
    Case("libc_walk_fork", "cpp", DENIED, OS_ONLY),
    Case("libc_walk_socket", "cpp", DENIED, OS_ONLY),
    Case("libc_walk_write_outside", "cpp", DENIED, OS_ONLY),
    Case("libc_walk_read_parent", "cpp", DENIED, OS_ONLY),
    Case("skips_rows_past_64", "cpp", INCORRECT,
         "a held-out shape has more than 64 rows (above the largest power of two the tuning "
         "shapes reach)", phrase={Status.INCORRECT: "held-out"}),
    Case("honest_start", "cpp", OK, "the task's own starting kernel",
         source=SILU_TASK / "silu_and_mul.cpp"),
    Case("honest_fast_exp", "cpp", OK, "an inline, vectorised exp: legitimately faster",
         min_speedup=1.2),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_cpp_case(case, cpp_evaluator, cpp_start, probes, record_property):
    run_case(case, cpp_evaluator, cpp_start, probes, record_property)


# The screen is a first filter only: these kernels are judged again with it switched off in this
# process, so that the layers behind it (the imports check, the verdict out of the candidate's
# reach, the OS) are shown to stop them too.
PAST_THE_SCREEN = [c for c in CASES if c.name in {
    "pyapi_patch_compare", "pyapi_found_by_walking_elf", "forge_result_frame",
    "thread_finishes_later", "fork_orphan", "socket_loopback"}]


@pytest.mark.parametrize("case", PAST_THE_SCREEN, ids=str)
def test_cpp_case_past_the_screen(case, cpp_evaluator, cpp_start, probes, record_property,
                                  monkeypatch):
    monkeypatch.setattr(cpp_evaluator.language, "screen_rules", ())
    run_case(case, cpp_evaluator, cpp_start, probes, record_property)


def test_every_cpp_kernel_is_judged_somewhere():
    kernels = {p.stem for p in CASES[0].path.parent.glob("*.cpp")}
    elsewhere = {"kills_parent", "libc_walk_kills_parent", "crash_with_child_holding_pipes",
                 "plainly_wrong",  # test_judge_survives.py
                 "wrong_for_large_magnitudes"}  # test_coverage.py, through `kernelswarm eval`
    assert kernels - elsewhere == {c.name for c in CASES if c.source is None}
