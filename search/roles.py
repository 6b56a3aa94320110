"""The roles a lineage calls: plan, code, test and profile.

Implementations live in ``kernelswarm.agents``: built-in rules with no network, or language
models. Each role is called by one lineage at a time and must not keep state that another
lineage relies on.

- ``Planner.plan`` chooses the next move from a ``LineageView``.
- ``Coder.code`` realises a move as a new candidate; ``Coder.repair`` gets a failed candidate
  back with the evaluator's log and failing shape (structured debugging).
- ``Tester.checks`` adds shapes and value distributions beyond the task's, which the evaluator
  checks every candidate on (the evaluator itself runs the tests).
- ``Analyst.analyse`` turns an evaluation and its profile into feedback for the planner.

Roles that call a paid service report what they spent through ``usage()``; budgets in tokens
and money read it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from .candidate import Candidate
from .evaluation import Evaluation, Status
from .task import Task
from .withheld import Withheld

TUNE = "tune"  # the move that asks the lineage's Optuna tuner for knob values
ADOPT = "adopt"  # continue from the global best instead of the lineage's own
STOP = "stop"
REWRITE = "rewrite:"  # prefix: "rewrite:<transformation name>"
REPAIR = "repair"  # the move of a candidate the coder produced from a failed one

# Stages of a lineage, in order (staged optimisation): get a correct kernel, then cut memory
# traffic until the kernel nears the bandwidth roof, then work on compute.
CORRECTNESS, MEMORY, COMPUTE = "correctness", "memory", "compute"
STAGES = (CORRECTNESS, MEMORY, COMPUTE)


@dataclass(frozen=True)
class Usage:
    """What a role spent on a model service: calls, tokens, money, and answers it rejected.

    The one tally of model spending: budgets read it, the LLM ledger keeps one per role, and the
    MLflow sink sums the trace's calls into it (each ``LLMCall.usage()`` is one term).
    """

    calls: int = 0  # answers received, whether they parsed or not
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    malformed: int = 0  # answers that failed to parse and were asked again
    failures: int = 0  # requests given up after their retries
    attempts: int = 0  # requests sent, retries included
    latency_s: float = 0.0  # seconds spent waiting for answers

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(**{f.name: getattr(self, f.name) + getattr(other, f.name)
                        for f in fields(Usage)})

    def metrics(self, prefix: str) -> dict[str, float]:
        """Every figure as ``{prefix}.{name}``, for a metrics store."""
        return {f"{prefix}.{f.name}": float(getattr(self, f.name)) for f in fields(Usage)}


class _Role:
    def usage(self) -> Usage:
        """What this role has spent so far (zero for roles that call no service)."""
        return Usage()

    def until(self, deadline: float) -> None:  # noqa: B027 - optional
        """Every call this role makes from now on must end by ``deadline`` (Unix time); roles
        that call no service ignore it."""


@dataclass(frozen=True)
class Check:
    """An extra correctness check: a shape (dimension and dtype values) and an input scale.

    ``scale`` multiplies every floating input the task draws (large magnitudes: 100.0); the
    reference sees the same scaled inputs.
    """

    shape: Mapping[str, Any]
    scale: float = 1.0
    reason: str = ""

    @property
    def label(self) -> str:
        dims = ",".join(f"{k}={v}" for k, v in sorted(self.shape.items()))
        return dims if self.scale == 1.0 else f"{dims},scale={self.scale:g}"


@dataclass(frozen=True)
class Plan:
    """The planner's choice of the next move, with why."""

    move: str
    rationale: str = ""


# What limits a kernel, as an analyst judges it; a lineage moves on to compute work at "compute".
BOUNDS = ("memory", "compute", "latency", "unknown")


@dataclass(frozen=True)
class Facts:
    """What the analyst established about one evaluation, for the planner and the lineage.

    A measurement the evaluator did not make (no roofline, no registers, ``torch.compile`` not
    timed) is None or empty here, never a sentinel number; readers skip what is not known.
    """

    candidate_id: str = ""  # empty: facts about no evaluation (nothing known yet)
    move: str = ""  # the move that produced the candidate (``origin.move``)
    status: Status | None = None
    speedup: float = 0.0  # geometric mean over shapes vs the starting kernel (0 unless ok)
    speedup_vs_eager: float = 0.0  # the same vs PyTorch eager (0 unless ok and measured)
    message: str = ""  # the evaluator's message, trimmed
    knobs: Mapping[str, Any] = field(default_factory=dict)
    compile_s: float = 0.0
    worst_shape: str | None = None  # the shape with the least speedup vs the start
    worst_speedup: float | None = None
    roofline_fraction: float | None = None  # the least over shapes (the farthest from the roof)
    large_roofline_fraction: float | None = None  # the least over shapes bound by bandwidth
    small_roofline_fraction: float | None = None  # the least over the others (latency-bound)
    behind_compile: tuple[str, ...] = ()  # shapes slower than torch.compile, where it was timed
    registers: int | None = None  # the most registers per thread of the candidate's kernels
    spill_bytes: int | None = None
    failed_shape: str | None = None  # the first incorrect shape (INCORRECT only)
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    bound: str | None = None  # one of BOUNDS, where an analyst judged it
    suggestion: str = ""  # the analyst's suggested next change, in words
    analyst_error: str = ""  # why a model analyst gave no judgement

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def about(self, candidate: Candidate) -> bool:
        """Whether these facts are about ``candidate``."""
        return bool(self.candidate_id) and self.candidate_id == candidate.id


@dataclass(frozen=True)
class Feedback:
    """What the analyst made of an evaluation, for the planner and coder to read."""

    summary: str
    facts: Facts = field(default_factory=Facts)


@dataclass(frozen=True)
class Attempt:
    """One step of a lineage's history: what was tried and how it went."""

    step: int
    move: str
    candidate_id: str  # empty when the move produced no new candidate
    status: str  # an evaluation Status value, or "NO_CHANGE"
    speedup: float
    message: str = ""
    failed_shape: str = ""  # the first shape it was wrong on, where it was wrong
    # Per shape label, the speedup over the starting kernel (timed shapes of an OK evaluation):
    # what per-shape specialisation (a dispatch table) reads to pick a knob setting per shape.
    shape_speedups: tuple[tuple[str, float], ...] = ()
    knobs: tuple[tuple[str, Any], ...] = ()  # the candidate's knob values


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
    stage: str = MEMORY  # one of STAGES
    migrants: tuple[tuple[Candidate, Evaluation], ...] = ()  # elites of other lineages, best first
    failed: tuple[Candidate, Evaluation] | None = None  # the latest failure, while being repaired


class Planner(_Role, ABC):
    """Chooses the next move from the lineage's state and the latest feedback."""

    @abstractmethod
    def plan(self, view: LineageView) -> Plan: ...


class Coder(_Role, ABC):
    """Turns a plan into a new candidate derived from ``parent``.

    ``code`` returns None when the move does not apply to this kernel (no loop to unroll,
    transformation already present); the lineage records that and asks the planner again.
    """

    @abstractmethod
    def code(self, plan: Plan, parent: Candidate, view: LineageView) -> Candidate | None: ...

    def repair(self, failed: Candidate, evaluation: Evaluation,
               view: LineageView) -> Candidate | None:
        """A fixed version of ``failed`` given its verdict (compile log, wrong shape, crash), or
        None when this coder cannot repair it (the lineage then moves on). The default: None."""
        return None


class Tester(_Role, ABC):
    """Proposes checks beyond the task's own shapes: sizes 1, odd, not a power of two, large
    magnitudes. The evaluator runs them on every candidate, after the task's shapes."""

    @abstractmethod
    def checks(self, task: Task, language: str) -> tuple[Check, ...]: ...


class Analyst(_Role, ABC):
    """Turns an evaluation (status, timings, profile) into feedback."""

    @abstractmethod
    def analyse(self, candidate: Candidate, evaluation: Evaluation) -> Feedback: ...


@dataclass(frozen=True)
class Roles:
    """A lineage's four roles. ``withheld``: what they must never be told (the task's held-out
    shapes); the lineage screens every evaluation with it before a role reads it."""

    planner: Planner
    coder: Coder
    analyst: Analyst
    tester: Tester | None = None
    withheld: Withheld | None = None

    def until(self, deadline: float) -> None:
        """Every call of the roles must end by ``deadline`` (Unix time): the search's wall-time
        budget, known once the search starts, after the run's start-up."""
        for role in (self.planner, self.coder, self.analyst, self.tester):
            if role is not None:
                role.until(deadline)

    def usage(self) -> Usage:
        """What the roles spent together."""
        total = Usage()
        for role in (self.planner, self.coder, self.analyst, self.tester):
            if role is not None:
                total = total + role.usage()
        return total
