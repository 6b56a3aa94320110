"""The built-in coder: applies the named transformation of a ``rewrite:<name>`` plan."""

from __future__ import annotations

from kernelswarm.search import REWRITE, Candidate, Coder, LineageView, Origin, Plan

from .dispatch_move import DISPATCH, dispatch_candidate
from .transformation import Transformation
from .transforms import find_transformation


def rewrite_move(name: str) -> str:
    """The plan move that asks for the transformation called ``name``."""
    return f"{REWRITE}{name}"


def transformation_of(move: str, language: str) -> Transformation | None:
    """The transformation a ``rewrite:<name>`` move names for ``language``, or None."""
    if not move.startswith(REWRITE):
        return None
    return find_transformation(language, move[len(REWRITE):])


class RuleCoder(Coder):
    """Applies ``rewrite:<name>`` moves with the transformation library; no network, no state.

    Knobs the transformation adds start at its ``initial_knobs``; the parent's knobs keep their
    values.

    A ``dispatch`` move composes the current source's per-shape best knob settings into one
    kernel (agents/builtin/dispatch_move.py).

    Returns None when the move is not a rewrite, names no transformation for the parent's
    language, or the transformation does not apply (pattern absent, already applied).
    """

    def code(self, plan: Plan, parent: Candidate, view: LineageView) -> Candidate | None:
        if plan.move == DISPATCH:  # per-shape knob settings as one kernel, from the history
            return dispatch_candidate(view, min_gain=0.0) if parent.id == view.current.id else None
        transformation = transformation_of(plan.move, parent.language)
        if transformation is None:
            return None
        result = transformation.apply(parent.source, parent.space)
        if result is None or result[0] == parent.source:
            return None
        source, knob_space = result
        # New knobs start where they exercise the rewrite; knobs the parent had keep their values.
        fresh = {name: value for name, value in transformation.initial_knobs.items()
                 if name in knob_space and name not in parent.space}
        return parent.derive(source=source, knob_space=knob_space, knobs=fresh,
                             origin=Origin(role="coder", move=plan.move, rationale=plan.rationale))
