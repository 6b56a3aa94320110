"""A sweep cell that crashed says why in one line: the innermost cause, not Ray's remote traceback."""

from __future__ import annotations

from ray.exceptions import RayTaskError

from kernelswarm.evaluators.judge.runner_process import SandboxError
from kernelswarm.experiments.sweep.execute import crash_summary


def test_the_cause_inside_a_ray_task_error_is_named_on_one_line():
    cause = SandboxError("the runner failed to start: RuntimeError: CUDA out of memory. Tried to "
                         "allocate 448.00 MiB\nTraceback (most recent call last):\n  File ...")
    remote = RayTaskError("EvalWorker.evaluate", "Traceback (most recent call last):\n  ...\n"
                          "SandboxError: the runner failed", cause).as_instanceof_cause()
    outer = RayTaskError("EvalDispatcher.evaluate", "Traceback ...", remote).as_instanceof_cause()
    assert crash_summary(outer) == ("SandboxError: the runner failed to start: RuntimeError: "
                                    "CUDA out of memory. Tried to allocate 448.00 MiB")


def test_chained_and_plain_exceptions():
    try:
        try:
            raise KeyError("lineage 3")
        except KeyError as inner:
            raise RuntimeError("the tracker lost a record") from inner
    except RuntimeError as exc:
        assert crash_summary(exc) == "KeyError: 'lineage 3'"
    assert crash_summary(ValueError()) == "ValueError"
    assert len(crash_summary(ValueError("x" * 1000), limit=50)) == 50
