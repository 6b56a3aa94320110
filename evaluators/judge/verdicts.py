"""A dead or stuck runner in words: where it was, what the signal usually means, its log."""

from __future__ import annotations

from ..sandbox.crash import describe_exit
from .runner_process import Crashed, TimedOut


def _with_log(message: str, log_tail: str) -> str:
    return f"{message}\nsandbox log (tail):\n{log_tail}" if log_tail else message


def timeout_message(outcome: TimedOut, where: str, limit: str = "") -> str:
    """``limit``: the limit used and how it was set (``Deadline.describe``)."""
    limit = limit or f"run_timeout_s={outcome.limit_s:g} s"
    return _with_log(f"the run phase exceeded its limit of {limit} {where} and the sandbox was "
                     f"killed — an endless loop, or a kernel far too slow for this shape",
                     outcome.log_tail)


def crash_message(outcome: Crashed, where: str) -> str:
    if outcome.detail:
        text = f"{outcome.detail} {where}"
    else:
        text = describe_exit(outcome.returncode, where)
    return _with_log(text, outcome.log_tail)
