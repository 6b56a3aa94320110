"""The ``dispatch`` move: per-shape knob settings of the current source, composed into one kernel.

A source whose versions have knobs of their own per shape (a start generated from
``torch.compile``) needs no composition: the move sets each shape's knobs to their best values.

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

from kernelswarm.search import (
    Candidate,
    Evaluation,
    LineageView,
    Origin,
    candidate_id,
    knobs_of_shape,
    read_dispatch_table,
    read_shape_knobs,
)

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
    if not current.space or current.language not in LANGUAGES or read_dispatch_table(current.source):
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


def _same_source(view: LineageView, knobs: Mapping[str, Any], cid: str) -> bool:
    current = view.current
    return candidate_id(current.language, current.source, dict(knobs)) == cid


def per_shape_knob_bests(view: LineageView) -> PerShapeBests | None:
    """For a source whose versions have knobs of their own per shape (``read_shape_knobs``):
    each shape's fastest values of its own knobs among this source's candidates evaluated in
    this lineage, whatever the other shapes' knobs were (a shape's time depends on its own
    alone); None where fewer than two were measured on every shape."""
    current = view.current
    suffixes = read_shape_knobs(current.source)
    if not suffixes or not current.space:
        return None
    measured: list[tuple[dict[str, Any], dict[str, float]]] = [
        (dict(a.knobs), {k: v for k, v in a.shape_speedups if v > 0}) for a in view.history
        if a.status == "OK" and a.shape_speedups and _same_source(view, dict(a.knobs),
                                                                   a.candidate_id)]
    for pair in (view.best, view.global_best):
        if pair is not None and pair[0].source == current.source and not any(
                knobs == pair[0].knob_values for knobs, _ in measured):
            measured.append((pair[0].knob_values, _evaluation_speedups(pair[1])))
    labels = sorted(suffixes)
    complete = [(k, found) for k, found in measured if set(labels) <= set(found)]
    if len(complete) < 2:
        return None
    single = max(_geomean([found[label] for label in labels]) for _, found in complete)
    routes, bests = [], []
    for label in labels:
        knobs, found = max(complete, key=lambda m: m[1][label])
        routes.append((parse_label(label), knobs_of_shape(knobs, suffixes[label])))
        bests.append(found[label])
    return PerShapeBests(tuple(routes), single, _geomean(bests))


def _per_shape_knob_candidate(view: LineageView, min_gain: float) -> Candidate | None:
    """The current source with each shape's own knobs at that shape's best values."""
    bests = per_shape_knob_bests(view)
    if bests is None or bests.gain < min_gain:
        return None
    knobs = view.current.knob_values
    for _, values in bests.routes:
        knobs.update(values)
    described = "\n".join(f"  {', '.join(f'{k}={v}' for k, v in sorted(shape.items()))}: "
                          f"{', '.join(f'{k}={v}' for k, v in sorted(values.items()))}"
                          for shape, values in bests.routes)
    rationale = (f"Each shape's version has knobs of its own; taking each shape's best values "
                 f"from the candidates measured is estimated at {bests.combined:.2f}x against "
                 f"{bests.single:.2f}x for the best candidate.\n{described}")
    return view.current.derive(knobs=knobs, origin=Origin(role="coder", move=DISPATCH,
                                                          rationale=rationale))


def dispatch_candidate(view: LineageView, min_gain: float = MIN_GAIN) -> Candidate | None:
    """The dispatch kernel of the current source's per-shape bests, or None when the bests do
    not differ, the estimated gain is under ``min_gain``, or no dispatch source can be composed.
    A source with knobs per shape needs no new source: the candidate is the same source with
    each shape's knobs at their best (``per_shape_knob_bests``)."""
    if read_shape_knobs(view.current.source):
        return _per_shape_knob_candidate(view, min_gain)
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
