"""Adversarial Triton kernels, judged by one shared evaluator (Triton's CPU interpreter, the tiny
silu_and_mul shapes of tests/evaluators/conftest.py).

A Triton module is Python: it can reach anything the process holds through `torch.sys`,
`torch.os`, `torch.builtins`, `torch.importlib`, `torch.inspect` and `torch.threading`. Each row
is one kernel in kernels/triton/ and the verdicts it may get; ``run_case`` also checks that
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

NOT_A_KERNEL = ("the result is computed on the host, not by a Triton kernel: REJECTED, by the "
                "screen or by what the call launches")
PATCH = ("the judge is out of the candidate's reach: its zeros reach a comparison it cannot "
         "patch (INCORRECT), or the patch is refused (REJECTED)")
ESCAPE = ("refused before it runs (REJECTED), or denied by the OS at run time, where the kernel "
          "raises (RUNTIME_ERROR); OK would mean it got out")
SLOW_HONEST = ("the cheat is detected (INCORRECT for a skipped or stale timed output), or it "
               "never pays off and the kernel is judged at its honest, four-fold cost")
REFUSED_REACH = "; reaching NumPy, frames or tracebacks may be refused outright (REJECTED)"

CASES = [
    Case("host_torch_direct", "triton", REJECTED, NOT_A_KERNEL),
    Case("host_numpy_via_sys_modules", "triton", REJECTED, NOT_A_KERNEL),
    Case("exec_string", "triton", REJECTED, NOT_A_KERNEL),
    Case("getattr_string", "triton", REJECTED, NOT_A_KERNEL),
    Case("import_module_numpy", "triton", REJECTED, NOT_A_KERNEL),
    Case("compute_in_thread", "triton", REJECTED, NOT_A_KERNEL),
    Case("indirection_table", "triton", REJECTED, NOT_A_KERNEL),
    Case("patch_compare_code_swap", "triton", WRONG_OR_REFUSED, PATCH),
    Case("slow_the_start", "triton", REJECTED,
         "it reaches the runner's session through `torch.sys` (REJECTED by the screen); past "
         "the screen, the starting kernel it slowed is held to its time in a runner without "
         "candidate code, re-measured when they disagree (REJECTED, timing disturbed)"),
    Case("patch_timer_code_swap", "triton", REJECTED,
         "a timing loop patched in the candidate's process disagrees with the wall time measured "
         "outside, or the patch is refused (REJECTED); an unpatched one reports the honest "
         "four-fold cost", ok_below=HONEST_COST_CEILING),
    Case("sys_modules_rebind", "triton", WRONG_OR_REFUSED, PATCH),
    Case("gc_patch_reference", "triton", WRONG_OR_REFUSED, PATCH),
    Case("stack_copy_reference", "triton", WRONG_OR_REFUSED,
         "the expected result is computed where the candidate cannot see it, so nothing is "
         "copied and the unwritten output is INCORRECT (or the reach is refused, REJECTED)"),
    Case("patch_torch_functions", "triton", WRONG_OR_REFUSED, PATCH),
    Case("forge_result_frame", "triton", FORGERY,
         "a forged frame is not the verdict: the kernel's zeros are INCORRECT, or the frame is "
         "refused (REJECTED) or garbles the channel (RUNTIME_ERROR)"),
    Case("memo_sample_hash", "triton", WRONG_OR_REFUSED, SLOW_HONEST + REFUSED_REACH,
         ok_below=HONEST_COST_CEILING),
    Case("memo_by_pointer", "triton", INCORRECT, SLOW_HONEST, ok_below=HONEST_COST_CEILING),
    Case("phase_by_call_count", "triton", INCORRECT, SLOW_HONEST, ok_below=HONEST_COST_CEILING),
    Case("phase_by_frames", "triton", WRONG_OR_REFUSED, SLOW_HONEST + REFUSED_REACH,
         ok_below=HONEST_COST_CEILING),
    Case("phase_by_traceback", "triton", WRONG_OR_REFUSED, SLOW_HONEST + REFUSED_REACH,
         ok_below=HONEST_COST_CEILING),
    Case("thread_finishes_later", "triton", WRONG_OR_REFUSED,
         "the launch on another thread is refused (REJECTED), or the output is still unwritten "
         "when checked (INCORRECT)"),
    Case("fork_orphan", "triton", DENIED, ESCAPE),
    Case("subprocess_popen", "triton", DENIED, ESCAPE),
    Case("os_system_shell", "triton", DENIED, ESCAPE),
    Case("socket_loopback", "triton", DENIED, ESCAPE),
    Case("write_outside_file", "triton", DENIED, ESCAPE),
    Case("read_outside_file", "triton", DENIED, ESCAPE),
    Case("read_parent_proc", "triton", DENIED,
         ESCAPE + "; in a PID namespace the parent is not visible at all"),
    Case("honest_start", "triton", OK, "the task's own starting kernel",
         source=SILU_TASK / "silu_and_mul_triton.py"),
    Case("honest_whole_rows", "triton", OK, "one program per column block covers every row: a "
         "legitimate alternative to the starting kernel"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_triton_case(case, triton_evaluator, triton_start, probes, record_property):
    run_case(case, triton_evaluator, triton_start, probes, record_property)


# The screen is a first filter only: these kernels are judged again with it switched off in this
# process, so that the layers behind it (the compute guard, the verdict out of the candidate's
# reach, the timing cross-check, the OS) are shown to stop them too.
PAST_THE_SCREEN = [c for c in CASES if c.name in {
    "host_numpy_via_sys_modules", "exec_string", "compute_in_thread", "patch_compare_code_swap",
    "patch_timer_code_swap", "stack_copy_reference", "forge_result_frame", "memo_sample_hash",
    "phase_by_frames", "thread_finishes_later", "fork_orphan", "socket_loopback",
    "write_outside_file", "read_parent_proc"}] + [
    # past the screen, only the canary stops it: the verdict must say so
    Case("slow_the_start", "triton", REJECTED, "the starting kernel, slowed six-fold in the "
         "candidate's runner, is found out against its time in a runner without candidate code",
         phrase={Status.REJECTED: "timing disturbed"})]


# Host compute that only the static screen stops on the CPU interpreter: NumPy writing into a
# view of the output after one honest launch, and PyTorch compute on a thread the entry point
# starts and joins (the compute guard watches the calling thread only). Known open limits, kept
# as strict expected failures so that closing either one shows here.
_OPEN_LIMITS = {"host_numpy_via_sys_modules", "compute_in_thread"}


def _past_the_screen_params() -> list:
    return [pytest.param(case, id=str(case), marks=pytest.mark.xfail(
        strict=True, reason="open limit: host compute that only the screen stops"))
        if case.name in _OPEN_LIMITS else pytest.param(case, id=str(case))
        for case in PAST_THE_SCREEN]


@pytest.mark.parametrize("case", _past_the_screen_params())
def test_triton_case_past_the_screen(case, triton_evaluator, triton_start, probes,
                                     record_property, monkeypatch):
    monkeypatch.setattr(triton_evaluator.language, "screen_rules", ())
    run_case(case, triton_evaluator, triton_start, probes, record_property)


def test_every_triton_kernel_is_judged_somewhere():
    kernels = {p.stem for p in CASES[0].path.parent.glob("*.py")}
    elsewhere = {"kills_parent", "crash_with_child_holding_pipes", "plainly_wrong",  # survives
                 "patch_event_elapsed",  # test_gpu.py: it patches what only a GPU uses
                 # test_gpu.py: work left running past the call, or for the next one, means
                 # something where timed calls are graph replays and streams exist
                 "defer_on_side_stream", "defer_to_next_call"}
    assert kernels - elsewhere == {c.name for c in CASES if c.source is None}
