"""The ``dispatch`` move: per-shape knob settings of the current source, composed into one kernel.

Tuning measures each knob setting of a source on every tuning shape (``Attempt.shape_speedups``).
Where the best setting differs from shape to shape, one setting for all shapes leaves speed on
the table; the dispatch kernel (agents/builtin/dispatch_source.py) holds each shape's best
setting as a route. It is then checked and timed like any candidate: the estimate below only
decides whether it is worth an evaluation.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernelswarm.search import Candidate, Evaluation, LineageView, Origin, candidate_id
from kernelswarm.search.dispatch import read_table

from .dispatch_source import LANGUAGES, compose

DISPATCH = "dispatch"  # the plan move
MIN_GAIN = 0.02  # the estimated gain over the best single setting that earns an evaluation
SETTINGS_LIMIT = 4096  # knob settings enumerated to recognise a source's candidates


@dataclass(frozen=True)
class PerShapeBests:
    """Each tuning shape's fastest knob setting of one source, and what holding them all in one
    kernel is expected to gain over the best single setting (from the speedups measured)."""

    routes: tuple[tuple[Mapping[str, Any], Mapping[str, Any]], ...]  # (shape, knob values)
    single: float  # geometric mean speedup of the best single setting (measured on every shape)
    combined: float  # geometric mean of each shape's best speedup

    @property
    def gain(self) -> float:
        return self.combined / self.single - 1.0 if self.single > 0 else 0.0

    @property
    def distinct(self) -> int:
        """How many different settings the routes use."""
        return len({tuple(sorted(k.items())) for _, k in self.routes})


def parse_label(label: str) -> dict[str, Any]:
    """A shape label (``Shape.label``: ``d=4096,dtype=float32,tokens=1``) back as a shape."""
    shape: dict[str, Any] = {}
    for part in label.split(","):
        key, _, value = part.partition("=")
        shape[key] = int(value) if value.lstrip("-").isdigit() else value
    return shape


def _settings_by_id(candidate: Candidate) -> dict[str, dict[str, Any]] | None:
    space = candidate.space
    names = sorted(space)
    if math.prod(len(space[n]) for n in names) > SETTINGS_LIMIT:
        return None
    settings = (dict(zip(names, values, strict=True))
                for values in itertools.product(*(space[n] for n in names)))
    return {candidate_id(candidate.language, candidate.source, s): s for s in settings}


def _evaluation_speedups(evaluation: Evaluation) -> dict[str, float]:
    if not evaluation.ok:
        return {}
    return {s.shape: s.speedup_vs_start for s in evaluation.shapes
            if math.isfinite(s.speedup_vs_start) and s.speedup_vs_start > 0}


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else 0.0


def per_shape_bests(view: LineageView) -> PerShapeBests | None:
    """The per-shape bests of the current source's knob settings evaluated in this lineage, or
    None where there is nothing to specialise (no knobs, a dispatch kernel already, fewer than
    two settings measured on every shape)."""
    current = view.current
    if not current.space or current.language not in LANGUAGES or read_table(current.source):
        return None
    settings = _settings_by_id(current)
    if settings is None:
        return None
    measured: dict[str, dict[str, float]] = {}
    for attempt in view.history:
        if attempt.status == "OK" and attempt.candidate_id in settings and attempt.shape_speedups:
            measured[attempt.candidate_id] = {k: v for k, v in attempt.shape_speedups if v > 0}
    for pair in (view.best, view.global_best):
        if pair is not None and pair[0].id in settings and pair[0].id not in measured:
            measured[pair[0].id] = _evaluation_speedups(pair[1])
    labels = sorted(set().union(*measured.values())) if measured else []
    complete = [cid for cid, found in measured.items() if set(labels) <= set(found)]
    if len(complete) < 2 or not labels:
        return None
    single = max(_geomean([measured[cid][label] for label in labels]) for cid in complete)
    routes, bests = [], []
    for label in labels:
        cid = max(complete, key=lambda c: (measured[c][label], c))
        routes.append((parse_label(label), settings[cid]))
        bests.append(measured[cid][label])
    return PerShapeBests(tuple(routes), single, _geomean(bests))


def dispatch_candidate(view: LineageView, min_gain: float = MIN_GAIN) -> Candidate | None:
    """The dispatch kernel of the current source's per-shape bests, or None when the bests do
    not differ, the estimated gain is under ``min_gain``, or no dispatch source can be composed."""
    bests = per_shape_bests(view)
    if bests is None or bests.distinct < 2 or bests.gain < min_gain:
        return None
    current = view.current
    composed = compose(current.source, current.language, current.entry, bests.routes)
    if composed is None:
        return None
    source, table = composed
    rationale = (f"Per-shape knob settings differ ({bests.distinct} settings over "
                 f"{len(table.routes)} shapes); one kernel routing each shape to its best is "
                 f"estimated at {bests.combined:.2f}x against {bests.single:.2f}x for the best "
                 f"single setting.\n{table.describe()}")
    return current.derive(source=source, knob_space={}, knobs={},
                          origin=Origin(role="coder", move=DISPATCH, rationale=rationale))
