"""What a lineage's history says about the kernel it is on now, read from a ``LineageView``.

History attempts carry candidate ids, not sources. A candidate id is a hash of (language,
source, knob values), so the ids of every knob setting of a source identify, exactly, the
attempts made with that source: the record below is built from those, and needs no memory in
the planner. Attempts that produced nothing (``NO_CHANGE``) have no id; they count for the
kernel if they came after the lineage moved to it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kernelswarm.search import ADOPT, TUNE, Attempt, Candidate, LineageView, candidate_id

from .coder import rewrite_move
from .transformation import Transformation

NO_CHANGE = "NO_CHANGE"  # Attempt.status of a move that produced no new candidate
SETTINGS_LIMIT = 4096  # knob settings enumerated per source; beyond it only exact ids match


def source_ids(language: str, source: str, space: Mapping[str, tuple[Any, ...]],
               limit: int = SETTINGS_LIMIT) -> frozenset[str] | None:
    """The ids of ``source`` at every knob setting of ``space``; None if there are over ``limit``."""
    names = sorted(space)
    if math.prod(len(space[n]) for n in names) > limit:
        return None
    return frozenset(candidate_id(language, source, dict(zip(names, values, strict=True)))
                     for values in itertools.product(*(space[n] for n in names)))


def since_current(view: LineageView) -> tuple[Attempt, ...]:
    """Attempts made since the lineage moved to its current kernel (by evaluating or adopting it)."""
    history = view.history
    for i in range(len(history) - 1, -1, -1):
        if history[i].candidate_id == view.current.id or history[i].move == ADOPT:
            return history[i + 1:]
    return history


def _ids_of(candidate: Candidate) -> frozenset[str]:
    return source_ids(candidate.language, candidate.source, candidate.space) or frozenset({candidate.id})


@dataclass(frozen=True)
class KernelRecord:
    """The current kernel's source as the history knows it.

    ``rewrites`` maps each transformation that applies to the source to the status of its
    latest attempt on this source (None: not tried yet). The tuning counts are over the source
    at any knob setting.
    """

    rewrites: Mapping[str, str | None]
    rewrite_attempts: Mapping[str, int]  # attempts of each rewrite in the whole lineage
    tune_trials: int  # tuned candidates of this source that were evaluated
    tune_failures: int  # tuned candidates of this source that were not OK
    idle_tunes_in_a_row: int  # latest TUNE moves that produced nothing new (tuner repeating)
    settings_seen: int  # distinct knob settings of this source evaluated (or started from)
    settings_total: int  # knob settings the source has (1 without knobs)

    @property
    def untried_settings(self) -> int:
        return self.settings_total - self.settings_seen


def _rewrite_outcome(view: LineageView, transformation: Transformation,
                     recent: tuple[Attempt, ...]) -> tuple[bool, str | None]:
    """(applies, status of its attempt on the current source or None)."""
    current = view.current
    result = transformation.apply(current.source, current.space)
    if result is None:
        return False, None
    source, space = result
    ids = source_ids(current.language, source, space)
    if ids is None:
        ids = frozenset({current.derive(source=source, knob_space=space).id})
    status = None
    for attempt in view.history:
        if attempt.candidate_id in ids:
            status = attempt.status
    move = rewrite_move(transformation.name)
    if any(a.move == move and a.status == NO_CHANGE for a in recent):
        status = NO_CHANGE
    return True, status


def read_record(view: LineageView, transformations: Iterable[Transformation]) -> KernelRecord:
    """The ``KernelRecord`` of ``view.current`` for these transformations."""
    recent = since_current(view)
    rewrites: dict[str, str | None] = {}
    for transformation in transformations:
        applies, status = _rewrite_outcome(view, transformation, recent)
        if applies:
            rewrites[transformation.name] = status
    attempts = {name: sum(1 for a in view.history if a.move == rewrite_move(name))
                for name in rewrites}
    ids = _ids_of(view.current)
    tuned = [a for a in view.history if a.move == TUNE and a.candidate_id in ids]
    in_a_row = 0
    for attempt in reversed(recent):
        if attempt.move != TUNE or attempt.status != NO_CHANGE:
            break
        in_a_row += 1
    seen = {a.candidate_id for a in view.history if a.candidate_id in ids} | {view.current.id}
    space = view.current.space
    return KernelRecord(
        rewrites=rewrites,
        rewrite_attempts=attempts,
        tune_trials=len(tuned),
        tune_failures=sum(1 for a in tuned if a.status != "OK"),
        idle_tunes_in_a_row=in_a_row,
        settings_seen=len(seen),
        settings_total=math.prod(len(v) for v in space.values()) if space else 1,
    )
