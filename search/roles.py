"""The roles a lineage calls each step: plan, code and profile (the evaluator is the test).

Implementations live in ``kernelswarm.agents``: built-in rules with no network, or language
models. Each role is called by one lineage at a time and must not keep state that another
lineage relies on.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .candidate import Candidate
from .evaluation import Evaluation

TUNE = "tune"  # the move that asks the lineage's Optuna tuner for knob values
ADOPT = "adopt"  # continue from the global best instead of the lineage's own
STOP = "stop"
REWRITE = "rewrite:"  # prefix: "rewrite:<transformation name>"


@dataclass(frozen=True)
class Plan:
    """The planner's choice of the next move, with why."""

    move: str
    rationale: str = ""


@dataclass(frozen=True)
class Feedback:
    """What the analyst made of an evaluation, for the planner and coder to read."""

    summary: str
    facts: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Attempt:
    """One step of a lineage's history: what was tried and how it went."""

    step: int
    move: str
    candidate_id: str  # empty when the move produced no new candidate
    status: str  # an evaluation Status value, or "NO_CHANGE"
    speedup: float
    message: str = ""


@dataclass(frozen=True)
class LineageView:
    """What the roles see of a lineage when asked for the next move."""

    lineage: int
    step: int
    current: Candidate  # the kernel the next move starts from
    best: tuple[Candidate, Evaluation] | None
    global_best: tuple[Candidate, Evaluation] | None
    history: tuple[Attempt, ...]
    feedback: Feedback | None

    def tried(self, move: str) -> int:
        """How often ``move`` was tried on the current kernel's source family."""
        return sum(1 for a in self.history if a.move == move)


class Planner(ABC):
    """Chooses the next move from the lineage's state and the latest feedback."""

    @abstractmethod
    def plan(self, view: LineageView) -> Plan: ...


class Coder(ABC):
    """Turns a plan into a new candidate derived from ``parent``.

    Returns None when the move does not apply to this kernel (no loop to unroll, transformation
    already present); the lineage records that and asks the planner again.
    """

    @abstractmethod
    def code(self, plan: Plan, parent: Candidate, view: LineageView) -> Candidate | None: ...


class Analyst(ABC):
    """Turns an evaluation (status, timings, profile) into feedback."""

    @abstractmethod
    def analyse(self, candidate: Candidate, evaluation: Evaluation) -> Feedback: ...


@dataclass(frozen=True)
class Roles:
    planner: Planner
    coder: Coder
    analyst: Analyst
