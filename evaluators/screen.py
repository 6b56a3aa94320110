"""Static screen: refuse sources that use what a kernel must not (threads, I/O, timers, ...).

The screen is a first line of defence and a fast, actionable message for the coder; the sandbox
process is the real boundary. Each language declares its rules as data (``ScreenRule``); a rule is
a regular expression matched against each logical source line after comments are blanked out
(so that a comment mentioning ``fork`` is harmless) and backslash-continued lines are joined (so
that splitting a name over two lines does not hide it). String literals are kept, so that a quoted
``#include "..."`` is still seen.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class ScreenRule:
    """One forbidden construct: ``pattern`` (a regular expression) and why it is forbidden."""

    name: str
    pattern: str
    reason: str

    def __post_init__(self) -> None:
        re.compile(self.pattern)


@dataclass(frozen=True)
class ScreenFinding:
    """The first line a rule refused."""

    rule: ScreenRule
    line: int
    text: str

    @property
    def message(self) -> str:
        return (f"static screen: line {self.line} uses {self.rule.name} (`{self.text}`): "
                f"{self.rule.reason}")


def blank_comments(source: str) -> str:
    """``source`` with ``//`` and ``/* */`` comments replaced by spaces, newlines kept."""
    out: list[str] = []
    i, n = 0, len(source)
    quote = ""
    while i < n:
        c = source[i]
        if quote:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(source[i + 1])
                i += 2
                continue
            if c == quote or c == "\n":
                quote = ""
            i += 1
        elif c in "\"'":
            quote = c
            out.append(c)
            i += 1
        elif source.startswith("//", i):
            end = source.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
            i = end
        elif source.startswith("/*", i):
            end = source.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append("".join(ch if ch == "\n" else " " for ch in source[i:end]))
            i = end
        else:
            out.append(c)
            i += 1
    return "".join(out)


def logical_lines(source: str) -> list[tuple[int, str]]:
    """(first physical line number, text) with backslash-newline continuations joined."""
    lines: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 1
    for number, line in enumerate(source.split("\n"), start=1):
        if not pending:
            start = number
        if line.endswith("\\"):
            pending.append(line[:-1])
            continue
        pending.append(line)
        lines.append((start, "".join(pending)))
        pending = []
    if pending:
        lines.append((start, "".join(pending)))
    return lines


def screen(source: str, rules: Iterable[ScreenRule]) -> ScreenFinding | None:
    """The first forbidden construct in ``source``, or None when it passes."""
    compiled = [(rule, re.compile(rule.pattern)) for rule in rules]
    for number, text in logical_lines(blank_comments(source)):
        for rule, pattern in compiled:
            if pattern.search(text):
                shown = " ".join(text.split())
                return ScreenFinding(rule, number, shown[:160])
    return None
