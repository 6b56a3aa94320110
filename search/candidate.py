"""Candidates: immutable kernel proposals, identified by what they compile to."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

# A kernel's source may name its structure on a line with this marker and a name (``//
# kernelswarm structure: warp_rows``): the built-in agent's cuda structures do, and MAP-Elites
# reads it as a descriptor (search/strategies/map_elites.py).
STRUCTURE_MARKER = "kernelswarm structure:"


def candidate_id(language: str, source: str, knobs: Mapping[str, Any]) -> str:
    """Content hash of (language, source, knob values): equal ids compile to the same kernel."""
    payload = json.dumps([language, source, sorted(knobs.items())], default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Origin:
    """Who proposed a candidate and why."""

    role: str = "seed"  # seed | coder | tuner | migrant
    move: str = ""  # the plan's move, e.g. "rewrite:fast_exp" or "tune"
    rationale: str = ""
    model: str = "builtin"
    tokens: int = 0
    cost_usd: float = 0.0


@dataclass(frozen=True)
class Candidate:
    """A kernel to evaluate: source, language and knob settings, with its lineage of origin."""

    language: str
    source: str
    entry: str
    knobs: tuple[tuple[str, Any], ...] = ()
    knob_space: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    parents: tuple[str, ...] = ()
    lineage: int = -1
    origin: Origin = field(default_factory=Origin)
    spec: tuple[tuple[str, Any], ...] = ()  # language extras from the task (argtypes, ...)

    @classmethod
    def create(cls, *, language: str, source: str, entry: str,
               knobs: Mapping[str, Any] | None = None,
               knob_space: Mapping[str, tuple[Any, ...]] | None = None,
               parents: tuple[str, ...] = (), lineage: int = -1, origin: Origin | None = None,
               spec: Mapping[str, Any] | None = None) -> Candidate:
        knob_space = dict(knob_space or {})
        knobs = dict(knobs or {})
        for name in knob_space:
            knobs.setdefault(name, knob_space[name][0])
        unknown = set(knobs) - set(knob_space)
        if unknown:
            raise ValueError(f"knobs {sorted(unknown)} are not in the knob space {sorted(knob_space)}")
        for name, value in knobs.items():
            if value not in knob_space[name]:
                raise ValueError(f"knob {name}={value!r} is not one of {knob_space[name]}")
        return cls(language=language, source=source, entry=entry,
                   knobs=tuple(sorted(knobs.items())),
                   knob_space=tuple(sorted((k, tuple(v)) for k, v in knob_space.items())),
                   parents=tuple(parents), lineage=lineage, origin=origin or Origin(),
                   spec=tuple(sorted((spec or {}).items())))

    @cached_property  # a hash of the source: the tracker asks for it many times per record
    def id(self) -> str:
        return candidate_id(self.language, self.source, dict(self.knobs))

    @property
    def knob_values(self) -> dict[str, Any]:
        return dict(self.knobs)

    @property
    def space(self) -> dict[str, tuple[Any, ...]]:
        return dict(self.knob_space)

    @property
    def spec_dict(self) -> dict[str, Any]:
        return dict(self.spec)

    def derive(self, *, source: str | None = None, knobs: Mapping[str, Any] | None = None,
               knob_space: Mapping[str, tuple[Any, ...]] | None = None, lineage: int | None = None,
               origin: Origin | None = None) -> Candidate:
        """A child of this candidate with some parts replaced; knobs left out keep their values."""
        space = dict(knob_space) if knob_space is not None else self.space
        merged = {k: v for k, v in self.knob_values.items() if k in space and v in space[k]}
        merged.update(knobs or {})
        return Candidate.create(
            language=self.language, source=self.source if source is None else source,
            entry=self.entry, knobs=merged, knob_space=space, parents=(self.id,),
            lineage=self.lineage if lineage is None else lineage,
            origin=origin or Origin(), spec=self.spec_dict)
