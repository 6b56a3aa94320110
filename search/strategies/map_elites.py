"""MAP-Elites: the best kernel of every cell of behaviour, wherever it came from.

A kernel's cell is named by its *descriptors*, features of what it does rather than how fast
it is; each cell keeps its fastest kernel (by the speedup over the reference starting kernel,
so cells of several languages compare). Lineages are handed kernels drawn at random from the
filled cells of their language, so a kernel that is the best at something other than the
overall figure survives and can be built on. The descriptors (``[search.map_elites]``
``descriptors``, any of ``DESCRIPTORS``):

- ``language``: the kernel's language. Kernels of two languages are not interchangeable: a
  lineage only ever builds on its own.
- ``structure``: the kernel's structure, as its source declares it (a line with
  ``STRUCTURE_MARKER`` and a name, as the built-in agent's cuda structures write), ``dispatch``
  for a per-shape dispatch kernel (routes named ``<kernel>__route<i>``), else ``base``. A new
  structure starts slower than a tuned old one; its own cell keeps it while it is tuned.
- ``shape``: the timed shape on which the kernel gains most over the starting kernel. A kernel
  that wins the small shapes and one that wins the large ones are both kept: a dispatch kernel
  is made of such parts.
- ``move``: the kind of the move that made it (``rewrite``, ``tune``, ``repair``, ...).

The default is language x structure x shape.
"""

from __future__ import annotations

import math
import random
import re
from typing import Any

from ..archive import Member
from ..candidate import STRUCTURE_MARKER, Candidate
from ..evaluation import Evaluation
from .base import Strategy
from .option import Option

_STRUCTURE = re.compile(re.escape(STRUCTURE_MARKER) + r"\s*([A-Za-z0-9_\-]+)")


def structure(candidate: Candidate, evaluation: Evaluation) -> str:
    found = _STRUCTURE.search(candidate.source)
    if found:
        return found.group(1)
    return "dispatch" if "__route" in candidate.source else "base"


def winning_shape(candidate: Candidate, evaluation: Evaluation) -> str:
    timed = [(s.speedup_vs_start, s.shape) for s in evaluation.shapes
             if math.isfinite(s.speedup_vs_start)]
    return max(timed, key=lambda t: (t[0], t[1]))[1] if timed else "untimed"


def move_kind(candidate: Candidate, evaluation: Evaluation) -> str:
    return (candidate.origin.move or candidate.origin.role).split(":")[0]


DESCRIPTORS = {
    "language": lambda c, e: c.language,
    "structure": structure,
    "shape": winning_shape,
    "move": move_kind,
}
DEFAULT_DESCRIPTORS = ("language", "structure", "shape")


class MapElites(Strategy):
    """One kernel per cell of behaviour; lineages draw theirs from the filled cells."""

    name = "map_elites"
    options = (Option(
        "descriptors", list, DEFAULT_DESCRIPTORS,
        "what names a kernel's cell: `language`, `structure` (the structure its source declares "
        "with a `kernelswarm structure: <name>` line, `dispatch` for a per-shape dispatch "
        "kernel, else `base`), `shape` (the timed shape on which it gains most over the "
        "starting kernel), `move` (the kind of move that made it: `rewrite`, `tune`, "
        "`repair`, ...)", minimum=1, choices=tuple(DESCRIPTORS)),)

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.descriptors: tuple[str, ...] = self.option("descriptors")
        self.cells: dict[tuple[str, ...], Member] = {}
        self.replaced = 0  # kernels that took a filled cell from a slower one
        self._held: dict[int, set[str]] = {}  # kernels each lineage was handed

    def cell(self, candidate: Candidate, evaluation: Evaluation) -> tuple[str, ...]:
        return tuple(str(DESCRIPTORS[n](candidate, evaluation)) for n in self.descriptors)

    def keep(self, candidate: Candidate, evaluation: Evaluation) -> None:
        if not evaluation.ok:
            return
        key = self.cell(candidate, evaluation)
        known = self.cells.get(key)
        member = (candidate, evaluation)
        if known is None:
            self.cells[key] = member
        elif (self.archive.measure(member), known[0].id) > (self.archive.measure(known),
                                                            candidate.id):
            self.cells[key] = member
            self.replaced += 1

    def kept(self) -> list[Member]:
        return [self.cells[key] for key in sorted(self.cells)]

    def figures(self) -> dict[str, Any]:
        return {"cells": len(self.cells), "replaced": self.replaced,
                "migrations": len(self.shared)}

    def select(self, lineage: int, step: int) -> list[Member]:
        language = self.language_of(lineage)
        held = self._held.setdefault(lineage, set())
        offered = [m for m in self.kept() if m[0].lineage != lineage and m[0].id not in held
                   and language in (None, m[0].language)]
        count = min(self.population.migration.count, len(offered))
        rng = random.Random(f"{self.population.migration.seed}:{lineage}:{step}")
        moved = rng.sample(offered, count)
        held.update(c.id for c, _ in moved)
        return moved

    def restore(self, lineage: int, members: list[Member]) -> None:
        self._held.setdefault(lineage, set()).update(c.id for c, _ in members)


STRATEGY = MapElites
