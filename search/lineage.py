"""A lineage: the refine loop of one evolving kernel (plan -> code -> test -> profile -> reflect).

The lineage holds no evaluator and no I/O: ``propose`` returns the next candidate, the caller
evaluates it (in process, or on a cluster), and ``observe`` feeds the verdict back. That keeps
the loop the same whether it runs in one process or as a Ray actor.

- Structured debugging: when a candidate the coder wrote fails (does not compile, is wrong,
  crashes, hangs), the next step gives it back to ``Coder.repair`` with its verdict (the log, the
  failing shape), up to ``max_repairs`` times in a row, before the planner is asked again.
- Staged optimisation: the view's ``stage`` is ``correctness`` until the lineage holds a correct
  kernel, then ``memory`` until the analyst says the kernel is compute-bound or at the bandwidth
  roof, then ``compute``; profile feedback is only given for correct kernels.
- Islands: the lineage sees other lineages' kernels only as migrants (``receive``); the view's
  ``global_best`` is the best kernel received so far, which the planner may ADOPT.
- Held-out shapes: every evaluation the lineage keeps or hands its roles is screened with
  ``roles.withheld`` first (``search.withheld``), so no held-out shape, value or error reaches
  an agent; the caller records the full evaluation.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .budget import Budget, Spent
from .candidate import Candidate, Origin
from .evaluation import Evaluation, Status, clearly_faster
from .roles import (
    ADOPT,
    COMPUTE,
    CORRECTNESS,
    MEMORY,
    REPAIR,
    STOP,
    TUNE,
    Attempt,
    Facts,
    Feedback,
    LineageView,
    Plan,
    Roles,
)
from .screening import Screen, screened_speedup
from .tuning import KnobTuner

MAX_REPLANS = 8  # plans in a row that yield nothing new before the lineage gives up
MEMORY_ROOF = 0.85  # a memory-bound kernel this close to the roofline moves on to compute
MAX_REJECTIONS = 8  # candidates in a row not judged (novelty rejection) before it gives up
NOT_NOVEL = "NOT_NOVEL"  # an attempt's status: not judged, too close to a judged kernel


def study_key(candidate: Candidate) -> str:
    """The key of a candidate's tuning study: candidates sharing source and knob space share one
    study. (Not the archive's ``source_family``, which ignores the knob space.)"""
    text = candidate.source + repr(candidate.knob_space)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _shape_speedups(evaluation: Evaluation) -> tuple[tuple[str, float], ...]:
    """Per timed shape of an OK evaluation, its speedup over the starting kernel."""
    if not evaluation.ok:
        return ()
    return tuple((s.shape, s.speedup_vs_start) for s in evaluation.shapes
                 if math.isfinite(s.speedup_vs_start))


@dataclass
class _Pending:
    plan: Plan
    study: str | None = None  # the tuning study's key, for a tuning trial
    trial: int | None = None
    repair: int = 0  # which repair attempt in a row this candidate is (0: not a repair)
    first: bool = False  # one of the lineage's first candidates (``first_candidates``)


# A first candidate (torch.compile's kernel) at most this much slower than the lineage's best is
# still the kernel the lineage goes on from: its knobs (per shape) are what the search tunes.
FIRST_MARGIN = 0.03


class Lineage:
    """One lineage's state machine. Not thread-safe: one caller drives it."""

    def __init__(self, lineage: int, start: Candidate, start_eval: Evaluation, roles: Roles,
                 tuner: KnobTuner, budget: Budget, max_repairs: int = 2,
                 clock: Callable[[], float] = time.monotonic,
                 first_candidates: Sequence[Candidate] = (), screen_shapes: int = 0) -> None:
        self.lineage = lineage
        self.screen_shapes = screen_shapes  # 0: every candidate timed on every shape
        self.roles = roles
        self.tuner = tuner
        self.budget = budget
        self.max_repairs = max_repairs
        self._clock = clock
        self._started = clock()
        self.current = start
        self.history: list[Attempt] = []
        # Roles see evaluations only as screened (no held-out shape, value or error).
        start_eval = self._screen(start_eval)
        self.best: tuple[Candidate, Evaluation] | None = (start, start_eval) if start_eval.ok else None
        self.feedback: Feedback | None = roles.analyst.analyse(start, start_eval)
        self._best_feedback: Feedback | None = self.feedback if start_eval.ok else None
        self.step = 0
        self.evaluated = 0
        self.gpu_s = 0.0
        self.since_improvement = 0
        self.stop_reason: str | None = None
        self.received: tuple[Candidate, Evaluation] | None = None  # best migrant so far
        self.migrants: tuple[tuple[Candidate, Evaluation], ...] = ()
        self._failed: tuple[Candidate, Evaluation, int] | None = None  # being repaired
        self._tried: set[str] = {start.id}
        self.rejected = 0  # candidates not judged: too close to a judged kernel
        self._rejected_in_row = 0
        self._pending: dict[str, _Pending] = {}
        # Kernels proposed before the roles are asked (a start generated from torch.compile):
        # each judged like any candidate, the lineage going on from it unless it is more than
        # FIRST_MARGIN slower than the lineage's best.
        self._firsts = [dataclasses.replace(c, lineage=lineage) for c in first_candidates]

    @property
    def best_speedup(self) -> float:
        return self.best[1].speedup if self.best else 0.0

    @property
    def stage(self) -> str:
        """Where the staged optimisation is: correctness, memory, then compute."""
        if self.best is None:
            return CORRECTNESS
        facts = self._best_feedback.facts if self._best_feedback is not None else Facts()
        if facts.bound == "compute":
            return COMPUTE
        fraction = facts.roofline_fraction
        if fraction is not None and math.isfinite(fraction) and fraction >= MEMORY_ROOF:
            return COMPUTE
        return MEMORY

    def receive(self, migrants: list[tuple[Candidate, Evaluation]]) -> None:
        """Kernels of other lineages (migration); the best of all received is ``global_best``."""
        migrants = [(c, self._screen(e)) for c, e in migrants]
        self.migrants = tuple(migrants)
        for member in migrants:
            if self.received is None or member[1].speedup > self.received[1].speedup:
                self.received = member

    def view(self) -> LineageView:
        failed = self._failed[:2] if self._failed is not None else None
        return LineageView(self.lineage, self.step, self.current, self.best, self.received,
                           tuple(self.history), self.feedback, self.stage, self.migrants,
                           failed)

    def spent(self) -> Spent:
        usage = self.roles.usage()
        return Spent(candidates=self.evaluated, wall_s=self._clock() - self._started,
                     gpu_s=self.gpu_s, tokens=usage.tokens, cost_usd=usage.cost_usd,
                     since_improvement=self.since_improvement, best_speedup=self.best_speedup)

    def _screen(self, evaluation: Evaluation) -> Evaluation:
        withheld = self.roles.withheld
        return withheld.screen(evaluation) if withheld is not None else evaluation

    def _check_budget(self) -> str | None:
        return self.budget.stop_reason(self.spent())

    def propose(self) -> Candidate | None:
        """The next candidate to evaluate, or None once the lineage has stopped."""
        if self.stop_reason is None:
            self.stop_reason = self._check_budget()
        while self.stop_reason is None and self._firsts:
            first = self._firsts.pop(0)
            if first.id not in self._tried:
                self._pending[first.id] = _Pending(Plan(first.origin.move or "seed",
                                                        first.origin.rationale), first=True)
                self._tried.add(first.id)
                return first
        if self.stop_reason is None and self._failed is not None:
            repaired = self._repair()
            if repaired is not None:
                return repaired
        for _ in range(MAX_REPLANS):
            if self.stop_reason is not None:
                return None
            view = self.view()
            plan = self.roles.planner.plan(view)
            if plan.move == STOP:
                self.stop_reason = f"planner stopped: {plan.rationale}"
                return None
            candidate, pending = self._realise(plan, view)
            if candidate is not None and candidate.id not in self._tried:
                self._pending[candidate.id] = pending
                self._tried.add(candidate.id)
                return candidate
            self.history.append(Attempt(self.step, plan.move, "", "NO_CHANGE", 0.0,
                                        "the move produced no new candidate"))
            if pending.study is not None:
                self.tuner.tell(pending.study, pending.trial, None)
        self.stop_reason = f"no new candidate after {MAX_REPLANS} plans"
        return None

    def _repair(self) -> Candidate | None:
        """The coder's fix of the latest failure, or None (the planner takes over)."""
        assert self._failed is not None
        failed, evaluation, attempts = self._failed
        fixed = self.roles.coder.repair(failed, evaluation, self.view())
        if fixed is None or fixed.id in self._tried:
            self._failed = None
            return None
        fixed = dataclasses.replace(fixed, lineage=self.lineage)
        self._pending[fixed.id] = _Pending(Plan(REPAIR, f"repair attempt {attempts + 1} of "
                                                        f"{self.max_repairs}"), repair=attempts + 1)
        self._tried.add(fixed.id)
        return fixed

    def _realise(self, plan: Plan, view: LineageView) -> tuple[Candidate | None, _Pending]:
        if plan.move == ADOPT:
            adopted = self.received
            if adopted is None or adopted[0].id == self.current.id:
                return None, _Pending(plan)
            self.current = adopted[0]
            self.best = adopted if adopted[1].speedup > self.best_speedup else self.best
            return None, _Pending(plan)  # adopting evaluates nothing; the next plan builds on it
        origin_kwargs = dict(move=plan.move, rationale=plan.rationale)
        if plan.move == TUNE:
            space = self.current.space
            if not space:
                return None, _Pending(plan)
            study = study_key(self.current)
            asked = self.tuner.ask(study, space)
            if asked is None:  # every setting tried
                return None, _Pending(plan)
            number, knobs = asked
            child = self.current.derive(knobs=knobs, lineage=self.lineage,
                                        origin=Origin(role="tuner", **origin_kwargs))
            return child, _Pending(plan, study, number)
        child = self.roles.coder.code(plan, self.current, view)
        if child is None:
            return None, _Pending(plan)
        return dataclasses.replace(child, lineage=self.lineage), _Pending(plan)

    def reject(self, candidate: Candidate, reason: str) -> None:
        """A candidate this lineage proposed will not be judged (novelty rejection): the
        attempt is noted, and the lineage stops after ``MAX_REJECTIONS`` in a row."""
        pending = self._pending.pop(candidate.id, None)
        move = pending.plan.move if pending is not None else candidate.origin.move
        self.rejected += 1
        self._rejected_in_row += 1
        self.history.append(Attempt(self.step, move, candidate.id, NOT_NOVEL, 0.0, reason))
        if pending is not None and pending.study is not None:
            self.tuner.tell(pending.study, pending.trial, None)
        if self._failed is not None and pending is not None and pending.repair:
            self._failed = None  # its repair was rejected: the planner takes over
        if self._rejected_in_row >= MAX_REJECTIONS:
            self.stop_reason = (f"no novel candidate in {MAX_REJECTIONS} proposals in a row "
                                f"(novelty rejection)")

    def screen_for(self, candidate: Candidate) -> Screen | None:
        """What ``candidate`` (just proposed) is timed by: ``screen_shapes`` shapes against
        this lineage's best first (search/screening.py); None with screening off or no best
        yet. A first candidate (torch.compile's kernel, say) is judged in full: the lineage
        may go on from it a little slower than its best."""
        pending = self._pending.get(candidate.id)
        if self.screen_shapes <= 0 or self.best is None or (pending and pending.first):
            return None
        best, evaluation = self.best
        return Screen.of(evaluation, self.screen_shapes, against=best.id)

    def replay(self, candidate: Candidate, evaluation: Evaluation) -> None:
        """Re-apply a verdict recorded before a resume (the tuner's journal already holds it)."""
        self._tried.add(candidate.id)
        self.observe(candidate, evaluation, worker_s=evaluation.eval_s)
        self._failed = None  # a repair in flight at the stop is not resumed

    def observe(self, candidate: Candidate, evaluation: Evaluation,
                worker_s: float | None = None) -> None:
        """Take the verdict on a candidate this lineage proposed.

        ``worker_s``: seconds it occupied an evaluation worker (default ``evaluation.eval_s``;
        0 for a verdict reused from another lineage or an identical binary).
        """
        evaluation = self._screen(evaluation)  # from here on, what the roles may see
        pending = self._pending.pop(candidate.id, _Pending(Plan(candidate.origin.move or "external")))
        self.step += 1
        self.evaluated += 1
        self._rejected_in_row = 0
        self.gpu_s += evaluation.eval_s if worker_s is None else worker_s
        if pending.study is not None:  # a screened-out kernel is slower, not broken
            screened = screened_speedup(evaluation, self.best[1]) if self.best else 0.0
            self.tuner.tell(pending.study, pending.trial,
                            evaluation.speedup if evaluation.ok else screened or None)
        self.feedback = self.roles.analyst.analyse(candidate, evaluation)
        failed = evaluation.failed_shape() if evaluation.status is Status.INCORRECT else None
        self.history.append(Attempt(self.step, pending.plan.move, candidate.id,
                                    evaluation.status.value, evaluation.speedup, evaluation.message,
                                    failed.shape if failed is not None else "",
                                    _shape_speedups(evaluation), candidate.knobs))
        self._failed = None
        # A gain inside the timing noise of both kernels is not an improvement (and a kernel
        # within noise of the best does not replace it as the one to build on).
        if evaluation.ok and (self.best is None or clearly_faster(evaluation, self.best[1])):
            self.best = (candidate, evaluation)
            self._best_feedback = self.feedback
            self.current = candidate
            self.since_improvement = 0
        else:
            self.since_improvement += 1
            if pending.first and evaluation.ok and self.best is not None and \
                    evaluation.speedup >= self.best[1].speedup * (1.0 - FIRST_MARGIN):
                self.current = candidate  # within noise or the margin: go on from it
        if not evaluation.ok and evaluation.status is not Status.SCREENED_OUT \
                and candidate.origin.role == "coder" and pending.repair < self.max_repairs:
            self._failed = (candidate, evaluation, pending.repair)
