"""Dispatch tables: one kernel source holding several knob settings, each chosen per shape.

``torch.compile`` specialises per shape; a single knob setting for every shape loses to it
where the shapes want different settings (a small block for decode, a wide one for prefill). A
dispatch kernel compiles the same source once per *route* (a knob setting, chosen on one tuning
shape) into one file, and picks the route at launch from the sizes of the call.

The rule that picks a route, the same in Python and in the generated C (``select``): among the
routes whose ``exact`` dimensions (the dtype) equal the call's, or among all routes when none
does, the one nearest to the call in log2 of the ``sizes`` dimensions (sum of squared
differences); ties go to the earlier route. So each tuning shape gets its own route back, and
a shape never seen lands on the route of the nearest tuning shape: every route is a correct
kernel for every shape, so the choice only ever changes speed.

The table travels at the top of the kernel's own source, as a machine-readable comment line
(``kernelswarm dispatch: {json}``): the candidate's id covers it, a stored file carries it, and
the evaluator reads it back from the source (``read_dispatch_table``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MARKER = "kernelswarm dispatch: "


def route_symbol(name: str, index: int) -> str:
    """The name a route's copy of the ``extern "C"`` function ``name`` carries."""
    return f"{name}__route{index}"


def _is_size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Route:
    """One knob setting of a dispatch table and the tuning shape it was chosen on."""

    shape: tuple[tuple[str, Any], ...]
    knobs: tuple[tuple[str, Any], ...]

    @classmethod
    def of(cls, shape: Mapping[str, Any], knobs: Mapping[str, Any]) -> Route:
        return cls(tuple(sorted(shape.items())), tuple(sorted(knobs.items())))

    @property
    def shape_dict(self) -> dict[str, Any]:
        return dict(self.shape)

    @property
    def knob_values(self) -> dict[str, Any]:
        return dict(self.knobs)


@dataclass(frozen=True)
class DispatchTable:
    """Routes (knob settings per tuning shape) and the dimensions the choice reads."""

    entry: str  # the entry point the routes are copies of
    routes: tuple[Route, ...]
    sizes: tuple[str, ...]  # integer dimensions compared in log2
    exact: tuple[str, ...] = ()  # dimensions a route must match (dtype), where one does

    def __post_init__(self) -> None:
        if not self.routes:
            raise ValueError("a dispatch table needs at least one route")
        for route in self.routes:
            shape = route.shape_dict
            missing = [d for d in (*self.sizes, *self.exact) if d not in shape]
            if missing:
                raise ValueError(f"route shape {shape} lacks the dimensions {missing}")
            bad = [d for d in self.sizes if not _is_size(shape[d]) or shape[d] < 1]
            if bad:
                raise ValueError(f"route shape {shape}: sizes {bad} must be positive integers")

    @classmethod
    def build(cls, entry: str, routes: list[tuple[Mapping[str, Any], Mapping[str, Any]]],
              sizes: tuple[str, ...] | None = None, exact: tuple[str, ...] | None = None
              ) -> DispatchTable:
        """A table over (shape, knobs) pairs; ``sizes`` default to the integer dimensions
        every route's shape has, ``exact`` to the others."""
        shapes = [dict(s) for s, _ in routes]
        common = set.intersection(*(set(s) for s in shapes)) if shapes else set()
        if sizes is None:
            sizes = tuple(sorted(d for d in common if all(_is_size(s[d]) for s in shapes)))
        if exact is None:
            exact = tuple(sorted(d for d in common if d not in sizes))
        return cls(entry, tuple(Route.of(s, k) for s, k in routes), tuple(sizes), tuple(exact))

    def select(self, shape: Mapping[str, Any]) -> int:
        """The index of the route a call of ``shape`` takes (see the module docstring)."""
        indices = [i for i, r in enumerate(self.routes)
                   if all(r.shape_dict[d] == shape.get(d) for d in self.exact)]
        if not indices:
            indices = list(range(len(self.routes)))

        def distance(i: int) -> float:
            route = self.routes[i].shape_dict
            return sum((math.log2(max(int(shape[d]), 1)) - math.log2(route[d])) ** 2
                       for d in self.sizes if d in shape)

        return min(indices, key=lambda i: (distance(i), i))

    def knobs_for(self, shape: Mapping[str, Any]) -> dict[str, Any]:
        """The knob values a call of ``shape`` runs with."""
        return self.routes[self.select(shape)].knob_values

    @property
    def settings(self) -> list[dict[str, Any]]:
        """The distinct knob settings of the routes, in route order."""
        seen: list[dict[str, Any]] = []
        for route in self.routes:
            if route.knob_values not in seen:
                seen.append(route.knob_values)
        return seen

    def to_json(self) -> dict[str, Any]:
        return {"entry": self.entry, "sizes": list(self.sizes), "exact": list(self.exact),
                "routes": [{"shape": r.shape_dict, "knobs": r.knob_values} for r in self.routes]}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> DispatchTable:
        """The table ``to_json`` wrote; ``ValueError`` naming the missing key."""
        try:
            routes = tuple(Route.of(r["shape"], r["knobs"]) for r in doc["routes"])
            return cls(str(doc["entry"]), routes, tuple(doc["sizes"]), tuple(doc.get("exact", ())))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"a dispatch table needs entry, sizes and routes with shape and "
                             f"knobs; missing or malformed: {exc}") from None

    def header_line(self, comment: str) -> str:
        """The source's first line: the table after ``comment`` (``//`` or ``#``)."""
        return f"{comment} {MARKER}{json.dumps(self.to_json(), sort_keys=True)}"

    def describe(self) -> str:
        """One line per route, for people: shape -> knobs."""
        lines = []
        for i, route in enumerate(self.routes):
            shape = ",".join(f"{k}={v}" for k, v in route.shape)
            knobs = " ".join(f"{k}={v}" for k, v in route.knobs) or "(defaults)"
            lines.append(f"route {i}: {shape} -> {knobs}")
        return "\n".join(lines)


def read_dispatch_table(source: str) -> DispatchTable | None:
    """The dispatch table a source's first line carries, or None for a plain source (or a
    first line whose table does not parse)."""
    first = source.split("\n", 1)[0]
    if MARKER not in first:
        return None
    try:
        return DispatchTable.from_json(json.loads(first.split(MARKER, 1)[1]))
    except ValueError:
        return None


# A kernel holding one version per shape (a start generated from torch.compile) may give each
# tuning shape's version knobs of its own, named with a suffix per shape; a line with this
# marker maps each shape's label to its suffix, so that each shape's best setting can be read
# from candidates that differ in every shape's knobs at once (its time depends only on its own).
SHAPE_KNOBS_MARKER = "kernelswarm shape knobs: "


def shape_knob_line(suffixes: Mapping[str, str]) -> str:
    """The line (without a comment sign) mapping each shape label to its knobs' suffix."""
    return SHAPE_KNOBS_MARKER + json.dumps(dict(suffixes), sort_keys=True)


def read_shape_knobs(source: str) -> dict[str, str]:
    """Shape label -> the suffix of that shape's own knobs, from a source's marker line in its
    first lines ({} for a source without one, or with one that does not parse)."""
    for line in source.split("\n", 8)[:8]:
        if SHAPE_KNOBS_MARKER in line:
            try:
                found = json.loads(line.split(SHAPE_KNOBS_MARKER, 1)[1])
            except ValueError:
                return {}
            if isinstance(found, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                for k, v in found.items()):
                return found
            return {}
    return {}


def knobs_of_shape(knobs: Mapping[str, Any], suffix: str) -> dict[str, Any]:
    """The knobs among ``knobs`` that belong to the shape with ``suffix``: with one shape (an
    empty suffix) all of them; else those ending in it."""
    if not suffix:
        return dict(knobs)
    return {k: v for k, v in knobs.items() if k.endswith(suffix)}
