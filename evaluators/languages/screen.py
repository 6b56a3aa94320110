"""Static screen: refuse sources that use what a kernel must not (threads, I/O, timers, ...).

The screen is a first line of defence and a fast, actionable message for the coder; the sandbox
process is the real boundary. Each language declares its rules as data, of two kinds:

- ``ScreenRule`` (C-like sources): a regular expression matched against each logical source line
  after backslash-continued lines are joined (so that splitting a name over two lines does not
  hide it) and then comments are blanked out (so that a comment mentioning ``fork`` is harmless),
  in the compiler's order. String literals are kept, so that a quoted ``#include "..."`` is still
  seen.
- ``SyntaxRule`` (Python sources): a function that finds forbidden nodes in the module's syntax
  tree, which sees through comments, strings, line breaks and spacing alike. A source that does
  not parse passes the screen; the build reports its syntax error.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable
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
class SyntaxRule:
    """One forbidden construct in Python: ``find(tree)`` yields the nodes that use it."""

    name: str
    reason: str
    find: Callable[[ast.Module], Iterable[ast.AST]]


@dataclass(frozen=True)
class ScreenFinding:
    """The first line a rule refused."""

    rule: ScreenRule | SyntaxRule
    line: int
    text: str

    @property
    def message(self) -> str:
        return (f"static screen: line {self.line} uses {self.rule.name} (`{self.text}`): "
                f"{self.rule.reason}")


_RAW_STRING_PREFIXES = ("R", "LR", "uR", "UR", "u8R")


def _token_before(source: str, i: int) -> str:
    """The identifier or number characters right before position ``i``."""
    start = i
    while start > 0 and (source[start - 1].isalnum() or source[start - 1] == "_"):
        start -= 1
    return source[start:i]


def _raw_string_end(source: str, i: int) -> int:
    """Where the raw string literal whose quote is at ``i`` ends (past its closing quote)."""
    open_paren = source.find("(", i + 1, i + 18)  # a delimiter has at most 16 characters
    if open_paren < 0:
        return i + 1
    closing = ")" + source[i + 1:open_paren] + '"'
    end = source.find(closing, open_paren + 1)
    return len(source) if end < 0 else end + len(closing)


def blank_comments(source: str) -> str:
    """``source`` with ``//`` and ``/* */`` comments replaced by spaces, newlines kept.

    Literals are followed as the compiler reads them, so that none can make code look like a
    comment: raw strings (``R"x( ... )x"``, which may hold quotes and ``/*``) are kept whole,
    and a quote inside a number (``1'000'000``) separates digits rather than opening a literal.
    """
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
        elif c == '"' and _token_before(source, i) in _RAW_STRING_PREFIXES:
            end = _raw_string_end(source, i)
            out.append(source[i:end])
            i = end
        elif c == "'" and _token_before(source, i)[:1].isdigit():
            out.append(c)  # a digit separator
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
    """(first physical line number, text) with backslash-newline continuations joined (also
    where spaces separate the backslash from the newline, as GCC accepts)."""
    lines: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 1
    for number, line in enumerate(source.split("\n"), start=1):
        if not pending:
            start = number
        spliced = line.rstrip(" \t\f\v\r")  # GCC splices a backslash followed by spaces too
        if spliced.endswith("\\"):
            pending.append(spliced[:-1])
            continue
        pending.append(line)
        lines.append((start, "".join(pending)))
        pending = []
    if pending:
        lines.append((start, "".join(pending)))
    return lines


def screen(source: str, rules: Iterable[ScreenRule | SyntaxRule]) -> ScreenFinding | None:
    """The first forbidden construct in ``source`` (by line), or None when it passes."""
    rules = tuple(rules)
    findings = [_screen_lines(source, [r for r in rules if isinstance(r, ScreenRule)]),
                _screen_syntax(source, [r for r in rules if isinstance(r, SyntaxRule)])]
    return min((f for f in findings if f is not None), key=lambda f: f.line, default=None)


def _screen_lines(source: str, rules: list[ScreenRule]) -> ScreenFinding | None:
    """The first logical line (comments blanked) that a regular-expression rule matches."""
    compiled = [(rule, re.compile(rule.pattern)) for rule in rules]
    if not compiled:
        return None
    # Lines are spliced before comments are found, as the compiler does: a comment's end may be
    # spliced together from two lines (`*\` then `/`).
    spliced = logical_lines(source)
    blanked = blank_comments("\n".join(text for _, text in spliced)).split("\n")
    for (number, _), text in zip(spliced, blanked, strict=True):
        for rule, pattern in compiled:
            if pattern.search(text):
                shown = " ".join(text.split())
                return ScreenFinding(rule, number, shown[:160])
    return None


def _screen_syntax(source: str, rules: list[SyntaxRule]) -> ScreenFinding | None:
    """The earliest node (by line, then column) that any syntax rule finds."""
    if not rules:
        return None
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    lines = source.splitlines()
    found: list[tuple[int, int, int, SyntaxRule]] = []
    for order, rule in enumerate(rules):
        for node in rule.find(tree):
            line = getattr(node, "lineno", 1)
            found.append((line, getattr(node, "col_offset", 0), order, rule))
    if not found:
        return None
    line, _, _, rule = min(found, key=lambda item: item[:3])
    text = " ".join(lines[line - 1].split()) if 0 < line <= len(lines) else ""
    return ScreenFinding(rule, line, text[:160])
