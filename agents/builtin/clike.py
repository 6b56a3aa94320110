"""Reading C-like source (C, C++, CUDA) just well enough to rewrite it safely.

Rewrites work on the text. This module finds what they anchor on -- ``for`` loops, the
parameters of ``extern "C"`` functions, the line where code starts -- on a *masked* copy of the
source in which comments and the insides of string and character literals (and, on request,
preprocessor lines) are blanked out with spaces, so that every offset in the mask is an offset in
the source. A construct the scanner cannot read with confidence raises ``SourceError``; the
rewrites turn that into "does not apply" rather than guess.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice


class SourceError(ValueError):
    """The source uses a construct this scanner does not read (raw strings, unbalanced brackets)."""


_PAIRS = {"(": ")", "[": "]", "{": "}"}
_IDENT_CHAR = re.compile(r"[A-Za-z0-9_]")


def _blank(text: str) -> str:
    return "".join("\n" if ch == "\n" else " " for ch in text)


def _literal_end(source: str, i: int, quote: str) -> int:
    """Offset just past the literal whose opening quote is at ``i``."""
    j = i + 1
    while j < len(source):
        ch = source[j]
        if ch == "\\":
            j += 2
            continue
        if ch == quote:
            return j + 1
        if ch == "\n":
            raise SourceError(f"unterminated literal at offset {i}")
        j += 1
    raise SourceError(f"unterminated literal at offset {i}")


def _starts_number(source: str, i: int) -> bool:
    """Whether the token running up to offset ``i`` is a number (a ' there is a digit separator)."""
    j = i
    while j > 0 and (_IDENT_CHAR.match(source[j - 1]) or source[j - 1] == "'"):
        j -= 1
    return j < i and source[j].isdigit()


def _mask_literals_and_comments(source: str) -> str:
    out: list[str] = []
    i, n = 0, len(source)
    while i < n:
        ch = source[i]
        if source.startswith("//", i):
            end = source.find("\n", i)
            end = n if end < 0 else end
            out.append(_blank(source[i:end]))
            i = end
        elif source.startswith("/*", i):
            end = source.find("*/", i + 2)
            if end < 0:
                raise SourceError(f"unterminated comment at offset {i}")
            out.append(_blank(source[i:end + 2]))
            i = end + 2
        elif ch == '"' or (ch == "'" and not _starts_number(source, i)):
            if ch == '"' and i > 0 and source[i - 1] == "R":
                raise SourceError("raw string literals are not supported")
            end = _literal_end(source, i, ch)
            out.append(ch + _blank(source[i + 1:end - 1]) + ch)
            i = end
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _mask_directives(masked: str) -> str:
    lines = masked.split("\n")
    out: list[str] = []
    continued = False
    for line in lines:
        if continued or line.lstrip().startswith("#"):
            continued = line.rstrip().endswith("\\")
            out.append(" " * len(line))
        else:
            out.append(line)
    return "\n".join(out)


def mask(source: str, *, directives: bool = True) -> str:
    """``source`` with comments, literal contents and (if ``directives``) preprocessor lines blanked."""
    masked = _mask_literals_and_comments(source)
    return _mask_directives(masked) if directives else masked


def matching(masked: str, open_index: int) -> int:
    """Offset of the bracket closing the one at ``open_index`` in masked text."""
    opening = masked[open_index]
    closing = _PAIRS[opening]
    depth = 0
    for j in range(open_index, len(masked)):
        if masked[j] == opening:
            depth += 1
        elif masked[j] == closing:
            depth -= 1
            if depth == 0:
                return j
    raise SourceError(f"unbalanced {opening!r} at offset {open_index}")


def apply_edits(source: str, edits: Iterable[tuple[int, int, str]]) -> str:
    """Replace each ``(start, end)`` span with its text; spans must not overlap."""
    result = source
    for start, end, text in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        result = result[:start] + text + result[end:]
    return result


# ---------------------------------------------------------------------------------------------
# for loops

_FOR = re.compile(r"\bfor\s*\(")
_LOOP_KEYWORD = re.compile(r"\b(for|while|do)\b")
_NESTED_STATEMENT = re.compile(r"(for|while|do|if|switch|else)\b")
_LOOP_VARIABLE = re.compile(r"(\w+)\s*=(?!=)")
# Lines that annotate the loop below them: pragmas, and the knob-driven unroll macro.
ANNOTATION = re.compile(r"^[ \t]*(#[ \t]*pragma\b.*|_Pragma\s*\(.*\)|KS_UNROLL_LOOP\s*\(.*\))[ \t]*$")


@dataclass(frozen=True)
class Loop:
    """A ``for`` statement: where it is, what it iterates on, and whether a line may go above it."""

    keyword: int  # offset of ``for``
    line_start: int  # offset of the line holding ``for``
    indent: str
    variable: str | None
    body: str  # masked text of the body
    innermost: bool
    annotatable: bool  # ``for`` starts its line and follows a complete statement
    annotations: tuple[str, ...]  # the annotation lines directly above, stripped


def statement_end(masked: str, start: int) -> int:
    """Offset just past the ``;`` that ends the simple statement starting at ``start``."""
    depth = 0
    for j in range(start, len(masked)):
        ch = masked[j]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                break
        elif ch == ";" and depth == 0:
            return j + 1
    raise SourceError(f"statement at offset {start} does not end")


def annotations_above(source: str, line_start: int) -> tuple[int, tuple[str, ...]]:
    """Start of the block of annotation lines right above ``line_start``, and those lines."""
    found: list[str] = []
    start = line_start
    while start > 0:
        previous = source.rfind("\n", 0, start - 1) + 1
        line = source[previous:start - 1]
        if not ANNOTATION.match(line):
            break
        found.append(line.strip())
        start = previous
    return start, tuple(reversed(found))


@dataclass(frozen=True)
class StatementLine:
    """Where a statement's line starts, the annotation lines above it, and whether a line may go
    above it."""

    line_start: int
    annotation_start: int  # start of the annotation lines right above (line_start if none)
    indent: str
    annotations: tuple[str, ...]  # those lines, stripped
    statement_start: bool  # the statement starts its line and follows a complete statement


def statement_line(source: str, masked: str, keyword: int) -> StatementLine:
    """The line of the statement whose first token is at ``keyword``."""
    line_start = masked.rfind("\n", 0, keyword) + 1
    indent = source[line_start:keyword]
    annotation_start, annotations = annotations_above(source, line_start)
    before = masked[:annotation_start].rstrip()
    return StatementLine(line_start, annotation_start, indent, annotations,
                         indent.strip() == "" and (before == "" or before[-1] in ";{}"))


def loop_body_start(masked: str, keyword: int, header_close: int) -> int:
    """Offset of the first character of the body of the ``for`` at ``keyword``."""
    after = header_close + 1
    while after < len(masked) and masked[after].isspace():
        after += 1
    if after >= len(masked):
        raise SourceError(f"for loop at offset {keyword} has no body")
    return after


def _loop_at(source: str, masked: str, keyword: int, paren: int) -> Loop:
    close = matching(masked, paren)
    init = masked[paren + 1:close].split(";", 1)[0]
    variable_match = _LOOP_VARIABLE.search(init)
    after = loop_body_start(masked, keyword, close)
    if masked[after] == "{":
        body = masked[after:matching(masked, after) + 1]
        innermost = _LOOP_KEYWORD.search(body) is None
    elif _NESTED_STATEMENT.match(masked, after):
        body, innermost = masked[after:], False
    else:
        body = masked[after:statement_end(masked, after)]
        innermost = _LOOP_KEYWORD.search(body) is None
    line = statement_line(source, masked, keyword)
    return Loop(keyword, line.line_start, line.indent,
                variable_match.group(1) if variable_match else None, body, innermost,
                line.statement_start, line.annotations)


def for_loops(source: str) -> list[Loop]:
    """Every ``for`` loop outside comments, literals and macro definitions, in source order."""
    masked = mask(source)
    return [_loop_at(source, masked, m.start(), m.end() - 1) for m in _FOR.finditer(masked)]


# ---------------------------------------------------------------------------------------------
# extern "C" functions

_EXTERN_C = re.compile(r'\bextern\s+"')
_NOT_A_FUNCTION = frozenset({"__attribute__", "__declspec", "alignas", "decltype", "sizeof",
                             "if", "for", "while", "switch", "return", "noexcept", "throw"})


@dataclass(frozen=True)
class Parameter:
    """One parameter of a function declaration: its span in the source and its masked text."""

    start: int
    end: int
    text: str


@dataclass(frozen=True)
class Function:
    """A function declared or defined with C linkage."""

    name: str
    parameters: tuple[Parameter, ...]


def split_parameters(masked: str, start: int, end: int) -> tuple[Parameter, ...]:
    parameters: list[Parameter] = []
    depth, begin = 0, start
    for j in range(start, end + 1):
        ch = masked[j] if j < end else ","
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        elif ch == "," and depth == 0:
            if masked[begin:j].strip():
                parameters.append(Parameter(begin, j, masked[begin:j]))
            begin = j + 1
    return tuple(parameters)


@dataclass(frozen=True)
class Declaration:
    """A name and its parameter list at brace depth 0: a function declared, or defined when a
    body follows."""

    name: str
    name_start: int
    parameters_open: int  # offset of the '('
    parameters_close: int  # offset of the ')'
    body: tuple[int, int] | None  # offsets of the body's '{' and '}'


_NAME_BEFORE = re.compile(r"([A-Za-z_]\w*)\s*$")
_BODY_AFTER_PARAMETERS = re.compile(r"\s*(?:const\s*)?(?:noexcept\s*)?\{")


def declarations(masked: str, not_functions: frozenset[str], start: int = 0,
                 end: int | None = None) -> Iterator[Declaration]:
    """The declarations at brace depth 0 of ``masked[start:end]``, in order, skipping the bodies
    they define and every name in ``not_functions`` (keywords and attributes called like
    functions)."""
    end = len(masked) if end is None else end
    depth, j = 0, start
    while j < end:
        ch = masked[j]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "(" and depth == 0:
            close = matching(masked, j)
            name = _NAME_BEFORE.search(masked, start, j)
            if name and name.group(1) not in not_functions:
                opened = _BODY_AFTER_PARAMETERS.match(masked, close + 1, end)
                body = None if opened is None else (opened.end() - 1,
                                                    matching(masked, opened.end() - 1))
                yield Declaration(name.group(1), name.start(1), j, close, body)
                if body is not None:
                    j = body[1] + 1
                    continue
            j = close
        j += 1


def _functions_in(masked: str, start: int, end: int, first_only: bool) -> list[Function]:
    """Functions declared at brace depth 0 of ``masked[start:end]``."""
    found = declarations(masked, _NOT_A_FUNCTION, start, end)
    return [Function(d.name, split_parameters(masked, d.parameters_open + 1, d.parameters_close))
            for d in islice(found, 1 if first_only else None)]


def extern_c_functions(source: str) -> list[Function]:
    """Functions with C linkage: ``extern "C" <declaration>`` and those in ``extern "C" { }``."""
    masked = mask(source)
    functions: list[Function] = []
    for m in _EXTERN_C.finditer(masked):
        if source[m.end() - 1:m.end() + 2] != '"C"':
            continue
        j = m.end() + 2
        while j < len(masked) and masked[j].isspace():
            j += 1
        if j < len(masked) and masked[j] == "{":
            functions += _functions_in(masked, j + 1, matching(masked, j), first_only=False)
            continue
        end = j
        depth = 0
        while end < len(masked) and not (depth == 0 and masked[end] in "{;"):
            depth += masked[end] == "("
            depth -= masked[end] == ")"
            end += 1
        functions += _functions_in(masked, j, end, first_only=True)
    return functions


# ---------------------------------------------------------------------------------------------
# where code starts

_OPENS_CONDITION = re.compile(r"#\s*(if|ifdef|ifndef)\b")
_CLOSES_CONDITION = re.compile(r"#\s*endif\b")


def code_start(source: str) -> int | None:
    """Where to insert file-level code: before the first code line and the comments attached
    to it, after the leading preprocessor lines and the blank line that ends them.

    None when there is no code, or when that place is inside an open ``#if`` (code inserted
    there would exist only under that condition).
    """
    masked = mask(source, directives=False)
    offset, anchor, depth, continued = 0, 0, 0, False
    for line, original in zip(masked.split("\n"), source.split("\n"), strict=True):
        stripped = line.strip()
        following = offset + len(line) + 1
        if continued or stripped.startswith("#"):
            if not continued:
                depth += bool(_OPENS_CONDITION.match(stripped))
                depth -= bool(_CLOSES_CONDITION.match(stripped))
            continued = stripped.endswith("\\")
            anchor = following
        elif not original.strip():
            anchor = following
        elif stripped:
            return anchor if depth == 0 else None
        offset = following
    return None
