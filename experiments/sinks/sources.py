"""Kernel source files as sinks store them: one file per candidate, named by its id, carrying the
knob values it was judged with.

A file in ``candidates/`` or ``best/`` is self-contained: a header block at the top states the
knob values, so that building that file alone, with no knobs, gives the kernel that was judged.

- Macro languages (cpp, cuda, torch-ext): ``#define NAME VALUE`` per knob, each under
  ``#ifndef NAME`` so that a ``-DNAME=...`` on a command line still overrides it. The compiler
  sees the same preprocessed code as with the evaluator's ``-DNAME=VALUE``, hence the same binary.
  A task's launcher may read knobs as well (cuda: the launch geometry, from ``fn.knobs``), so
  the values are also on the header's first line, where ``kernelswarm eval`` reads them back.
- Keyword languages (triton): the knobs reach the entry point as keyword arguments, so the
  defaults of the entry's knob parameters are set to the judged values.

The header's first line is machine-readable (``kernelswarm knobs: {json}``); ``read_kernel_file``
gives back the knob values and the source exactly as the candidate had it (so its id), which is
how ``kernelswarm eval`` and ``--resume`` read these files.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from kernelswarm.search import Candidate, KnobStyle, UnknownLanguage, language_spec, source_suffix

MARKER = "kernelswarm knobs: "
END = "end of kernelswarm knobs"


def source_file_name(candidate: Candidate) -> str:
    """``<candidate id><suffix>``, the language's canonical suffix (``LanguageSpec.suffix``), so
    that an editor and a person recognise the file; ``.txt`` for a language without a spec."""
    return f"{candidate.id}{source_suffix(candidate.language)}"


def _style(language: str) -> KnobStyle | None:
    try:
        return language_spec(language).knobs
    except UnknownLanguage:
        return None


def _macro(value: Any) -> str:
    return str(int(value)) if isinstance(value, bool) else str(value)


def _entry_defaults(source: str, entry: str, knobs: list[str]) -> dict[str, tuple[int, int, str]]:
    """Per knob parameter of the module-level ``entry``: (start, end) offsets of its default's
    text in ``source`` and that text."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    lines = source.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(lineno: int, col: int) -> int:  # ast columns are UTF-8 byte offsets
        line = lines[lineno - 1]
        return starts[lineno - 1] + len(line.encode()[:col].decode(errors="ignore"))

    found: dict[str, tuple[int, int, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == entry:
            args = node.args
            positional = args.posonlyargs + args.args
            with_default = positional[len(positional) - len(args.defaults):]
            pairs = list(zip(with_default, args.defaults, strict=True))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
                      if d is not None]
            for arg, default in pairs:
                if arg.arg in knobs and default.end_lineno is not None:
                    start = offset(default.lineno, default.col_offset)
                    end = offset(default.end_lineno, default.end_col_offset or 0)
                    found[arg.arg] = (start, end, source[start:end])
    return found


def _replace(source: str, spans: dict[str, tuple[int, int, str]], texts: dict[str, str]) -> str:
    for name, (start, end, _) in sorted(spans.items(), key=lambda item: -item[1][0]):
        if name in texts:
            source = source[:start] + texts[name] + source[end:]
    return source


def self_contained_source(candidate: Candidate) -> str:
    """The candidate's source with its knob values stated at the top (see the module doc)."""
    knobs = candidate.knob_values
    style = _style(candidate.language)
    if not knobs or style is None:
        return candidate.source
    if style is KnobStyle.MACROS:
        lines = [f"// {MARKER}{json.dumps(knobs, sort_keys=True)}",
                 "// The values this kernel was judged with: built alone, this file compiles to "
                 "the same code",
                 "// (a -DNAME=VALUE on the command line overrides one). A task's launcher may "
                 "read them too",
                 "// (e.g. the block size it launches with): kernelswarm eval of this file passes "
                 "them."]
        for name, value in sorted(knobs.items()):
            lines += [f"#ifndef {name}", f"#define {name} {_macro(value)}", "#endif"]
        return "\n".join(lines + [f"// {END}", candidate.source])
    spans = _entry_defaults(candidate.source, candidate.entry, list(knobs))
    originals = {name: text for name, (_, _, text) in spans.items()}
    body = _replace(candidate.source, spans, {name: repr(knobs[name]) for name in spans})
    header = [f"# {MARKER}{json.dumps({'knobs': knobs, 'defaults': originals}, sort_keys=True)}",
              f"# The values this kernel was judged with, set as the defaults of "
              f"{candidate.entry}'s",
              "# knob parameters, so that the file run alone launches the same kernel.",
              f"# {END}"]
    return "\n".join(header) + "\n" + body


def read_kernel_file(text: str, language: str, entry: str) -> tuple[dict[str, Any] | None, str]:
    """(knob values, the candidate's own source) of a file ``self_contained_source`` wrote;
    (None, ``text``) for a file without the header."""
    first, _, rest = text.partition("\n")
    style = _style(language)
    if MARKER not in first or END not in rest or style is None:
        return None, text
    try:
        doc = json.loads(first.split(MARKER, 1)[1])
    except ValueError:
        return None, text
    _, _, body = rest.partition(END + "\n")
    if style is KnobStyle.MACROS:
        return dict(doc), body
    knobs, defaults = dict(doc["knobs"]), dict(doc["defaults"])
    return knobs, _replace(body, _entry_defaults(body, entry, list(defaults)), defaults)
