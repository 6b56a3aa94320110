"""Compose one dispatch kernel from a source and its per-shape knob settings (macro languages).

The composed file (search/dispatch.py has the table and the rule that picks a route):

- its first line is the table (``// kernelswarm dispatch: {json}``), then a few lines for people;
- the source's top-level ``#include`` lines, once (a header included inside a namespace would
  declare its names there);
- per route ``i``: ``namespace ks_route<i> {``, ``#define`` of each knob value, the source with
  every ``extern "C"`` function renamed ``<name>__route<i>``, ``#undef`` of the knobs and of
  every macro the source defines (so the next copy's ``#ifndef`` defaults see a clean slate),
  ``}``. The source's own ``#ifndef KNOB`` defaults are skipped, since the knob is defined;
- where the entry point picks the route (``Dispatch.ENTRY_POINT``, cpp): the entry point
  itself, with the source's signature, choosing the route from its size parameters (those
  named like the task's integer dimensions) by the table's rule, written in C, and calling that
  route's copy. The library's callers see one function.
- where the launch picks it (``Dispatch.LAUNCH``, cuda): no host code: the route's kernels are
  ``<kernel>__route<i>`` and the evaluator picks the route from the launched shape before the
  task's launcher runs (``fn.kernel`` and ``fn.knobs`` then answer for that route).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from kernelswarm.search import SPECS, Dispatch, DispatchTable, route_symbol

from .clike import extern_c_functions, mask
from .cuda_source import device_functions

# The languages whose dispatch kernels this module composes (``LanguageSpec.dispatch``).
LANGUAGES = tuple(name for name, spec in SPECS.items() if spec.dispatch is not Dispatch.NONE)

_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include\b.*$")
_OPENS = re.compile(r"^[ \t]*#[ \t]*if(def|ndef)?\b")
_CLOSES = re.compile(r"^[ \t]*#[ \t]*endif\b")
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)", re.M)
_ATTRIBUTES = frozenset({"__launch_bounds__", "__attribute__", "__declspec", "alignas"})
_PARAMETER_NAME = re.compile(r"(\w+)\s*(?:\[[^\]]*\]\s*)*$")


def _split_includes(source: str) -> tuple[list[str], str]:
    """(top-level ``#include`` lines, the source without them). Includes inside an ``#if`` stay
    where they are: hoisting them would change what the condition guards."""
    includes, kept, depth = [], [], 0
    for line in source.split("\n"):
        if _OPENS.match(line):
            depth += 1
        elif _CLOSES.match(line):
            depth -= 1
        if depth == 0 and _INCLUDE.match(line):
            includes.append(line.strip())
        else:
            kept.append(line)
    return includes, "\n".join(kept)


def _rename(source: str, names: Sequence[str], index: int) -> str:
    """``source`` with each of ``names`` (outside comments and strings) renamed for route
    ``index``."""
    if not names:
        return source
    masked = mask(source, directives=False)
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    pieces, last = [], 0
    for match in pattern.finditer(masked):
        pieces += [source[last:match.start()], route_symbol(match.group(1), index)]
        last = match.end()
    return "".join(pieces) + source[last:]


def _c_linkage_names(source: str, language: str) -> list[str]:
    """The functions with C linkage, which every route must rename (a language whose routes are
    launched, cuda: its ``extern "C"`` kernels, read past ``__launch_bounds__``)."""
    names = {f.name for f in extern_c_functions(source)} - _ATTRIBUTES
    if SPECS[language].dispatch is Dispatch.LAUNCH:
        names |= {f.name for f in device_functions(source) if re.search(r"\bextern\b", f.head)}
    return sorted(names)


def _macro(value: Any) -> str:
    return str(int(value)) if isinstance(value, bool) else str(value)


def _signature(source: str, entry: str) -> list[tuple[str, str]] | None:
    """(parameter text, parameter name) of a ``void`` entry point, or None when the entry is not
    found, returns a value, or has a parameter this module cannot name."""
    for function in extern_c_functions(source):
        if function.name != entry:
            continue
        head = re.search(r'extern\s+"C"\s+([^;{}()"]*?)\b' + re.escape(entry) + r"\s*\(",
                         source)
        if head is None or head.group(1).split() != ["void"]:
            return None
        params = []
        for parameter in function.parameters:
            text = " ".join(source[parameter.start:parameter.end].split())
            name = _PARAMETER_NAME.search(text)
            if name is None or text == "void":
                return None
            params.append((text, name.group(1)))
        return params
    return None


def _cpp_entry(table: DispatchTable, params: list[tuple[str, str]]) -> list[str]:
    """The C entry point that picks a route by the table's rule and calls its copy."""
    names = [name for _, name in params]
    sizes = table.sizes
    routes = ", ".join("{" + ", ".join(repr(float(_log2(r.shape_dict[d]))) for d in sizes) + "}"
                       for r in table.routes)
    lines = [f'extern "C" void {table.entry}({", ".join(text for text, _ in params)}) {{',
             "    // The route of the nearest tuning shape, in log2 of the sizes (the dispatch",
             "    // table's rule); every route is the same kernel, only its knob values differ.",
             f"    const double at[{len(sizes)}] = {{"
             + ", ".join(f"std::log2(static_cast<double>({d} < 1 ? 1 : {d}))" for d in sizes)
             + "};",
             f"    static const double routes[{len(table.routes)}][{len(sizes)}] = {{{routes}}};",
             "    int chosen = 0;",
             "    double nearest = 0.0;",
             f"    for (int r = 0; r < {len(table.routes)}; ++r) {{",
             "        double distance = 0.0;",
             f"        for (int j = 0; j < {len(sizes)}; ++j) {{",
             "            const double gap = at[j] - routes[r][j];",
             "            distance += gap * gap;",
             "        }",
             "        if (r == 0 || distance < nearest) {",
             "            chosen = r;",
             "            nearest = distance;",
             "        }",
             "    }",
             "    switch (chosen) {"]
    call = ", ".join(names)
    for i in range(len(table.routes)):
        lines.append(f"    case {i}: ks_route{i}::{route_symbol(table.entry, i)}({call}); return;")
    lines += [f"    default: ks_route0::{route_symbol(table.entry, 0)}({call}); return;",
              "    }", "}"]
    return lines


def _log2(value: int) -> float:
    return math.log2(max(int(value), 1))


def compose(source: str, language: str, entry: str,
            routes: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]
            ) -> tuple[str, DispatchTable] | None:
    """The dispatch source and its table for ``routes`` ((tuning shape, knob values) pairs), or
    None where this module cannot compose one for the source (language not a macro language,
    entry not found, cpp entry without size parameters named like the shape's dimensions)."""
    if language not in LANGUAGES or not routes:
        return None
    names = _c_linkage_names(source, language)
    if entry not in names:
        return None
    table = DispatchTable.build(entry, [(dict(s), dict(k)) for s, k in routes])
    params: list[tuple[str, str]] | None = None
    own_entry = SPECS[language].dispatch is Dispatch.ENTRY_POINT  # C picks the route (cpp)
    if own_entry:
        params = _signature(source, entry)
        if params is None:
            return None
        # C sees only the entry's parameters: the sizes it takes, no dtype
        sizes = tuple(d for d in table.sizes if d in {name for _, name in params})
        if not sizes:
            return None
        table = DispatchTable(entry, table.routes, sizes, ())
    includes, body = _split_includes(source)
    knobs = sorted({k for r in table.routes for k in r.knob_values})
    undefine = sorted(set(knobs) | set(_DEFINE.findall(body)))
    lines = [table.header_line("//"),
             "// One kernel, several knob settings: each route below is the same source built",
             "// with the knob values chosen on one tuning shape; a call takes the route of the",
             "// nearest tuning shape in log2 of its sizes.",
             *(f"// {line}" for line in table.describe().split("\n"))]
    if own_entry and not any("<cmath>" in line for line in includes):
        includes.append("#include <cmath>")
    lines += includes
    for i, route in enumerate(table.routes):
        lines += ["", f"namespace ks_route{i} {{"]
        lines += [f"#define {k} {_macro(v)}" for k, v in route.knobs]
        lines.append(_rename(body, names, i).strip("\n"))
        lines += [f"#undef {name}" for name in undefine]
        lines.append(f"}}  // namespace ks_route{i}")
    if params is not None:
        lines += ["", *_cpp_entry(table, params)]
    return "\n".join(lines) + "\n", table
