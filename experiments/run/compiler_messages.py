"""Compiler messages that name the user's file, not the evaluator's copy of it.

The evaluator builds every source as ``kernel.<ext>`` in a scratch folder, so a compiler says
``kernel.cpp:12:5: error``; the user edits ``my_op.cpp`` or ``broken.cpp``. ``run``, ``eval``
and ``tasks check`` print the message with the file the user wrote, at its own line numbers.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from kernelswarm.search import Candidate, Evaluation, Task

# The evaluator's name for the source, with a line (and column) when the compiler gives one.
_KERNEL_FILE = re.compile(r"(?<![\w/.])kernel\.(?:cpp|cu|py)\b(?::(\d+))?")


def naming_the_file(evaluation: Evaluation, path: Path, text: str, source: str) -> Evaluation:
    """``evaluation`` with ``kernel.<ext>[:LINE]`` read as ``path[:LINE]``. ``text`` is the
    file's content, ``source`` what was built: a file a run wrote carries a knob header above
    the source, whose lines are added to the compiler's line numbers. A source not found in
    the file leaves the message as the compiler wrote it."""
    at = text.rfind(source) if source else -1
    if at < 0 or not text.endswith(source):
        return evaluation
    return replace(evaluation, message=naming_in(evaluation.message, path,
                                                 text[:at].count("\n")))


def naming_in(message: str, path: Path | str, offset: int = 0) -> str:
    """``message`` with ``kernel.<ext>[:LINE]`` read as ``path[:LINE + offset]``."""

    def rename(match: re.Match[str]) -> str:
        line = match.group(1)
        return str(path) + (f":{int(line) + offset}" if line else "")

    return _KERNEL_FILE.sub(rename, message)


def naming_the_users_file(evaluation: Evaluation, task: Task, start: Candidate) -> Evaluation:
    """The starting kernel's evaluation with the task folder's file holding its source named
    instead of ``kernel.cpp``: ``/home/me/tasks/my_op/my_op.cpp:12:5: error``."""
    for path in sorted(task.path.iterdir()):
        if (path.is_file() and path.suffix != ".pyc"
                and path.stat().st_size == len(start.source.encode())
                and path.read_text() == start.source):
            return naming_the_file(evaluation, path, start.source, start.source)
    return evaluation
