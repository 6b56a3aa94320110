"""A runner's ``fault`` reply, as a person reads it: the exception, its text and the end of its
traceback (an out-of-memory at start-up used to read only "OutOfMemoryError")."""

from __future__ import annotations

import traceback

import pytest

from kernelswarm.evaluators.judge.runner_process import SandboxError, fault_text, raise_fault
from kernelswarm.evaluators.runner.session import error_report


def _fault_reply(exc: BaseException) -> dict:
    try:
        raise exc
    except BaseException as raised:  # as the runner's serve loop builds it
        return {"type": "fault", **error_report(raised), "traceback": traceback.format_exc()}


def test_the_exceptions_text_and_where_it_was_raised_are_kept():
    reply = _fault_reply(RuntimeError("CUDA out of memory. Tried to allocate 448.00 MiB"))
    text = fault_text(reply)
    assert text.startswith("RuntimeError: CUDA out of memory. Tried to allocate 448.00 MiB")
    assert "_fault_reply" in text  # the traceback's end: where it was raised
    with pytest.raises(SandboxError) as raised:
        raise_fault(reply, "the runner failed to start")
    assert str(raised.value).startswith("the runner failed to start: RuntimeError: CUDA out of "
                                        "memory. Tried to allocate 448.00 MiB")


def test_a_reply_with_odd_fields_still_reads():
    assert fault_text({"type": "fault"}) == "an error"
    assert fault_text({"error": "X", "message": "", "traceback": None}) == "X"
    long = fault_text({"error": "X", "traceback": "line\n" * 10_000}, limit=200)
    assert len(long) < 300
