"""A lineage: the refine loop of one evolving kernel (plan -> code -> test -> profile -> reflect).

The lineage holds no evaluator and no I/O: ``propose`` returns the next candidate, the caller
evaluates it (in process, or on a cluster), and ``observe`` feeds the verdict back. That keeps
the loop the same whether it runs in one process or as a Ray actor.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from .budget import Budget
from .candidate import Candidate, Origin
from .evaluation import Evaluation
from .roles import ADOPT, STOP, TUNE, Attempt, Feedback, LineageView, Plan, Roles
from .tuning import KnobTuner

MAX_REPLANS = 8  # plans in a row that yield nothing new before the lineage gives up


def knob_family(candidate: Candidate) -> str:
    """Candidates sharing source and knob space share one tuning study."""
    text = candidate.source + repr(candidate.knob_space)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass
class _Pending:
    plan: Plan
    family: str | None = None
    trial: int | None = None


class Lineage:
    """One lineage's state machine. Not thread-safe: one caller drives it."""

    def __init__(self, lineage: int, start: Candidate, start_eval: Evaluation, roles: Roles,
                 tuner: KnobTuner, budget: Budget,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.lineage = lineage
        self.roles = roles
        self.tuner = tuner
        self.budget = budget
        self._clock = clock
        self._started = clock()
        self.current = start
        self.best: tuple[Candidate, Evaluation] | None = (start, start_eval) if start_eval.ok else None
        self.history: list[Attempt] = []
        self.feedback: Feedback | None = roles.analyst.analyse(start, start_eval)
        self.step = 0
        self.evaluated = 0
        self.since_improvement = 0
        self.stop_reason: str | None = None
        self._tried: set[str] = {start.id}
        self._pending: dict[str, _Pending] = {}

    @property
    def best_speedup(self) -> float:
        return self.best[1].speedup if self.best else 0.0

    def view(self, global_best: tuple[Candidate, Evaluation] | None) -> LineageView:
        return LineageView(self.lineage, self.step, self.current, self.best, global_best,
                           tuple(self.history), self.feedback)

    def _check_budget(self) -> str | None:
        return self.budget.stop_reason(
            candidates=self.evaluated, wall_s=self._clock() - self._started,
            since_improvement=self.since_improvement, best_speedup=self.best_speedup)

    def propose(self, global_best: tuple[Candidate, Evaluation] | None = None) -> Candidate | None:
        """The next candidate to evaluate, or None once the lineage has stopped."""
        if self.stop_reason is None:
            self.stop_reason = self._check_budget()
        for _ in range(MAX_REPLANS):
            if self.stop_reason is not None:
                return None
            view = self.view(global_best)
            plan = self.roles.planner.plan(view)
            if plan.move == STOP:
                self.stop_reason = f"planner stopped: {plan.rationale}"
                return None
            candidate, pending = self._realise(plan, view, global_best)
            if candidate is not None and candidate.id not in self._tried:
                self._pending[candidate.id] = pending
                self._tried.add(candidate.id)
                return candidate
            self.history.append(Attempt(self.step, plan.move, "", "NO_CHANGE", 0.0,
                                        "the move produced no new candidate"))
            if pending.family is not None:
                self.tuner.tell(pending.family, pending.trial, None)
        self.stop_reason = f"no new candidate after {MAX_REPLANS} plans"
        return None

    def _realise(self, plan: Plan, view: LineageView,
                 global_best: tuple[Candidate, Evaluation] | None) -> tuple[Candidate | None, _Pending]:
        if plan.move == ADOPT:
            if global_best is None or global_best[0].id == self.current.id:
                return None, _Pending(plan)
            self.current = global_best[0]
            self.best = global_best if global_best[1].speedup > self.best_speedup else self.best
            return None, _Pending(plan)  # adopting evaluates nothing; the next plan builds on it
        origin_kwargs = dict(move=plan.move, rationale=plan.rationale)
        if plan.move == TUNE:
            space = self.current.space
            if not space:
                return None, _Pending(plan)
            family = knob_family(self.current)
            asked = self.tuner.ask(family, space)
            if asked is None:  # every setting tried
                return None, _Pending(plan)
            number, knobs = asked
            child = self.current.derive(knobs=knobs, lineage=self.lineage,
                                        origin=Origin(role="tuner", **origin_kwargs))
            return child, _Pending(plan, family, number)
        child = self.roles.coder.code(plan, self.current, view)
        if child is None:
            return None, _Pending(plan)
        return dataclasses.replace(child, lineage=self.lineage), _Pending(plan)

    def replay(self, candidate: Candidate, evaluation: Evaluation) -> None:
        """Re-apply a verdict recorded before a resume (the tuner's journal already holds it)."""
        self._tried.add(candidate.id)
        self.observe(candidate, evaluation)

    def observe(self, candidate: Candidate, evaluation: Evaluation) -> None:
        """Take the verdict on a candidate this lineage proposed."""
        pending = self._pending.pop(candidate.id, _Pending(Plan(candidate.origin.move or "external")))
        self.step += 1
        self.evaluated += 1
        if pending.family is not None:
            self.tuner.tell(pending.family, pending.trial, evaluation.speedup if evaluation.ok else None)
        self.feedback = self.roles.analyst.analyse(candidate, evaluation)
        self.history.append(Attempt(self.step, pending.plan.move, candidate.id,
                                    evaluation.status.value, evaluation.speedup, evaluation.message))
        if evaluation.ok and evaluation.speedup > self.best_speedup:
            self.best = (candidate, evaluation)
            self.current = candidate
            self.since_improvement = 0
        else:
            self.since_improvement += 1
