"""A dead or stuck runner in words: where it was, what the signal usually means, its log."""

from __future__ import annotations

from ..crash import describe_exit
from .runner_process import Crashed, TimedOut


def _with_log(message: str, log_tail: str) -> str:
    return f"{message}\nsandbox log (tail):\n{log_tail}" if log_tail else message


def timeout_message(outcome: TimedOut, where: str) -> str:
    return _with_log(f"the run phase exceeded run_timeout_s={outcome.limit_s:g} s {where} and "
                     f"the sandbox was killed — an endless loop, or a kernel far too slow for "
                     f"this shape", outcome.log_tail)


def crash_message(outcome: Crashed, where: str) -> str:
    if outcome.detail:
        text = f"{outcome.detail} {where}"
    else:
        text = describe_exit(outcome.returncode, where)
    return _with_log(text, outcome.log_tail)
