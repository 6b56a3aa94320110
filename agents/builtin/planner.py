"""The built-in planner: rules over the lineage's view, seeded for diversity between lineages."""

from __future__ import annotations

import math
import random

from kernelswarm.search import (
    ADOPT,
    COMPUTE,
    MEMORY,
    STOP,
    TUNE,
    Facts,
    LineageView,
    Plan,
    Planner,
    Status,
    read_shape_knobs,
)

from .analyst import profile_facts
from .coder import rewrite_move
from .dispatch_move import DISPATCH, MIN_GAIN, dispatch_candidate
from .kernel_record import KernelRecord, read_record
from .transformation import Transformation
from .transforms import transformations_for


def seeded_order(names: list[str], seed: int) -> list[str]:
    """A permutation of ``names`` fixed by ``seed``, led by ``names[seed % len(names)]``, so that
    lineages with consecutive seeds start with different moves."""
    if not names:
        return []
    order = random.Random(seed).sample(names, len(names))
    first = names[seed % len(names)]
    order.remove(first)
    return [first, *order]


# Rewrites the profile rules single out, by name.
GEOMETRY = frozenset({"split_rows", "rows_per_block"})  # more blocks, or fuller blocks, per row
WIDENING = frozenset({"vectorize"})  # wider accesses
MORE_WORK_PER_THREAD = frozenset({"vectorize", "unroll"})  # each costs registers
REGISTER_PRESSURE = 128  # registers per thread from which a kernel counts as pressed


def _known(value: float | None) -> float | None:
    """``value`` where it is a finite measurement, else None."""
    return float(value) if value is not None and math.isfinite(value) else None


def _last_result(facts: Facts) -> str:
    """One sentence on the latest evaluation, for the rationale."""
    if not facts.candidate_id:
        return ""
    move = "the starting kernel" if facts.move in ("", "start") else facts.move
    if facts.ok:
        return f"Last: {move} was correct at {facts.speedup:.2f}x the start. "
    if facts.status is Status.SCREENED_OUT:
        return f"Last: {move} was correct but slower than this lineage's best (screened out). "
    where = f" on {facts.failed_shape}" if facts.failed_shape else ""
    status = facts.status.value if facts.status is not None else "not evaluated"
    return f"Last: {move} failed ({status}{where}). "


class RulePlanner(Planner):
    """Chooses moves by fixed rules; the first rule that fires decides.

    1. ADOPT when the global best is more than ``adopt_margin`` (2%) faster than this lineage's
       best and is not the kernel the lineage is on.
    2. STOP when the analyst's facts say that the current kernel reaches ``roofline_stop``
       (90%) of the roofline even on its farthest shape: little is left to gain.
    3. TUNE when the current kernel has knobs that were never tuned on its source and rewrites
       remain: a rewrite that added knobs gets one tuning trial before the next rewrite.
    4. ``rewrite:<name>``: the next transformation that applies to the current source and was
       not tried on it, those never tried in this lineage first. Within each of those two
       groups, by stage and then by the profile of the current kernel (the analyst's facts on
       its evaluation: the latest feedback, or the lineage's best when that is the current
       kernel), ties in this planner's seeded order:
       a. memory-stage rewrites before compute-stage ones, unless the large shapes are already
          at ``memory_done`` (80%) of the roofline, when compute comes first;
       b. among memory rewrites: where the small shapes are below ``small_far`` (30%) of the
          roofline or some shape is more than 3% behind torch.compile, the geometry rewrites
          (``split_rows``, ``rows_per_block``) first; otherwise, where the large shapes are
          below ``memory_done``, ``vectorize`` first;
       c. under register pressure (``REGISTER_PRESSURE`` registers per thread, or any spill),
          the rewrites that add work per thread (``vectorize``, ``unroll``) last.

       A rewrite counts as tried on a source when its result from that source was
       evaluated (any status, any knob setting) or came back NO_CHANGE since the lineage moved
       to the kernel; so a rewrite that was INCORRECT (a failed shape) or did not compile is
       never retried on the same source. On a changed kernel its effect may differ, so it may
       be tried again there, up to ``rewrite_attempts`` (2) attempts per lineage.
    5. ``dispatch`` once the source's knobs are tuned (no tuning left, or ``dispatch_after`` (8)
       tuned candidates evaluated) and its shapes' best settings differ by an estimated
       ``dispatch_gain`` (2%) or more over the best single setting: one kernel holding each
       shape's best setting as a route (agents/builtin/dispatch_move.py), not tried before.
       A source whose versions have knobs of their own per shape (a start generated from
       ``torch.compile``) needs no new kernel for it, only each shape's best values: from
       ``shape_knobs_after`` (2) tuned candidates on, whenever those bests make a candidate not
       tried before that is estimated ``shape_knobs_gain`` (0.5%) faster than the best measured
       (each shape's figure is measured, so the estimate is close), between tuning trials.
    6. TUNE while the source has knobs, fewer than ``tune_trials`` (24) tuned candidates
       evaluated, untried settings, fewer than ``max_tune_failures`` (2) tuned candidates that
       failed (knob settings that break correctness end the tuning of that source), and fewer
       than ``max_idle_tunes`` (5) tuning moves in a row that produced nothing new (the tuner
       repeated a setting already evaluated; the lineage itself gives up after 8 such plans).
    7. STOP, saying what was exhausted.

    The seed fixes the order of rewrites (different seeds lead with different rewrites); the
    plan is a function of the seed and the view alone, so a seed is reproducible and the planner
    keeps no state between calls.
    """

    def __init__(self, seed: int, *, adopt_margin: float = 0.02, roofline_stop: float = 0.9,
                 rewrite_attempts: int = 2, tune_trials: int = 24, max_tune_failures: int = 2,
                 max_idle_tunes: int = 5, memory_done: float = 0.8,
                 small_far: float = 0.3, dispatch_after: int = 8,
                 dispatch_gain: float = MIN_GAIN, shape_knobs_after: int = 2,
                 shape_knobs_gain: float = 0.005) -> None:
        self.seed = seed
        self.adopt_margin = adopt_margin
        self.roofline_stop = roofline_stop
        self.rewrite_attempts = rewrite_attempts
        self.tune_trials = tune_trials
        self.max_tune_failures = max_tune_failures
        self.max_idle_tunes = max_idle_tunes
        self.memory_done = memory_done
        self.small_far = small_far
        self.dispatch_after = dispatch_after
        self.dispatch_gain = dispatch_gain
        self.shape_knobs_after = shape_knobs_after
        self.shape_knobs_gain = shape_knobs_gain

    def order(self, language: str, facts: Facts | None = None) -> list[Transformation]:
        """The transformations for ``language`` in the order this planner tries them, given the
        analyst's facts on the current kernel (rule 4a-c; none: by stage, then seeded)."""
        library = {t.name: t for t in transformations_for(language)}
        seeded = [library[name] for name in seeded_order(list(library), self.seed)]
        return sorted(seeded, key=lambda t: self._priority(t, facts or Facts()))

    def _priority(self, transformation: Transformation, facts: Facts) -> tuple[int, ...]:
        large = _known(facts.large_roofline_fraction)
        small = _known(facts.small_roofline_fraction)
        memory_done = large is not None and large >= self.memory_done
        stage_rank = {MEMORY: 0, COMPUTE: 1}.get(transformation.stage, 2)
        if memory_done:
            stage_rank = {COMPUTE: 0, MEMORY: 1}.get(transformation.stage, 2)
        first = False
        if transformation.stage == MEMORY:
            parallelism = (small is not None and small < self.small_far) or bool(
                facts.behind_compile)
            first = (transformation.name in GEOMETRY if parallelism
                     else large is not None and not memory_done and transformation.name in WIDENING)
        registers = facts.registers or 0
        pressed = registers >= REGISTER_PRESSURE or (facts.spill_bytes or 0) > 0
        heavy = pressed and transformation.name in MORE_WORK_PER_THREAD
        return (int(heavy), stage_rank, int(not first))

    def plan(self, view: LineageView) -> Plan:
        facts = view.feedback.facts if view.feedback is not None else Facts()
        context = _last_result(facts)
        adopt = self._adopt(view)
        if adopt is not None:
            return Plan(ADOPT, context + adopt)
        at_roofline = self._at_roofline(view, facts)
        if at_roofline is not None:
            return Plan(STOP, at_roofline)
        order = self.order(view.current.language, self._profile(view, facts))
        record = read_record(view, order)
        untried = sorted((t for t in order if t.name in record.rewrites
                          and record.rewrites[t.name] is None
                          and record.rewrite_attempts[t.name] < self.rewrite_attempts),
                         key=lambda t: record.rewrite_attempts[t.name] > 0)
        tunable = self._tunable(view, record)
        if tunable and record.tune_trials == 0 and record.idle_tunes_in_a_row == 0 and untried:
            return Plan(TUNE, context + f"The kernel's knobs ({self._knobs(view)}) have not been "
                        "tuned on this source; one tuning trial before the next rewrite.")
        if untried:
            chosen = untried[0]
            again = (" It was tried on an earlier version of this kernel; the kernel has changed "
                     "since." if record.rewrite_attempts[chosen.name] else "")
            return Plan(rewrite_move(chosen.name), context + f"Next untried rewrite: {chosen.name}, "
                        f"to {chosen.description}.{again}")
        dispatch = self._dispatch(view, record, tunable)
        if dispatch is not None:
            return Plan(DISPATCH, context + dispatch)
        if tunable:
            return Plan(TUNE, context + "No rewrite left to try on this kernel; tuning its knobs "
                        f"({self._knobs(view)}), trial {record.tune_trials + 1} of at most "
                        f"{self.tune_trials}.")
        return Plan(STOP, self._exhausted(view, record))  # a stop reason stands on its own

    @staticmethod
    def _profile(view: LineageView, facts: Facts) -> Facts:
        """The facts on the current kernel: the latest feedback if it is about it, else those of
        the lineage's best evaluation if that is the current kernel; otherwise none."""
        if facts.about(view.current):
            return facts
        if view.best is not None and view.best[0].id == view.current.id:
            return profile_facts(view.best[1])
        return Facts()

    def _adopt(self, view: LineageView) -> str | None:
        if view.global_best is None or view.global_best[0].id == view.current.id:
            return None
        theirs = view.global_best[1].speedup
        ours = view.best[1].speedup if view.best is not None else 0.0
        if not theirs > ours * (1.0 + self.adopt_margin):
            return None
        return (f"The global best ({theirs:.2f}x) beats this lineage's best ({ours:.2f}x) by more "
                f"than {self.adopt_margin:.0%}; continue from it.")

    def _at_roofline(self, view: LineageView, facts: Facts) -> str | None:
        fraction = _known(facts.roofline_fraction)
        if not (facts.ok and facts.about(view.current)) or fraction is None:
            return None
        if fraction < self.roofline_stop:
            return None
        return (f"The current kernel reaches {fraction:.0%} of the roofline on every shape; at "
                f"most {1 / fraction - 1:.0%} is left to gain, not worth more candidates.")

    def _tunable(self, view: LineageView, record: KernelRecord) -> bool:
        return (bool(view.current.space) and record.untried_settings > 0
                and record.tune_trials < self.tune_trials
                and record.tune_failures < self.max_tune_failures
                and record.idle_tunes_in_a_row < self.max_idle_tunes)

    def _dispatch(self, view: LineageView, record: KernelRecord, tunable: bool) -> str | None:
        """The rationale of a dispatch move when rule 5 fires, else None."""
        per_shape = bool(read_shape_knobs(view.current.source))
        if tunable and record.tune_trials < (self.shape_knobs_after if per_shape
                                             else self.dispatch_after):
            return None
        candidate = dispatch_candidate(view, self.shape_knobs_gain if per_shape
                                       else self.dispatch_gain)
        if candidate is None or any(a.candidate_id == candidate.id for a in view.history):
            return None
        return candidate.origin.rationale

    @staticmethod
    def _knobs(view: LineageView) -> str:
        return ", ".join(f"{k} in {list(v)}" for k, v in view.current.space.items())

    def _exhausted(self, view: LineageView, record: KernelRecord) -> str:
        tried = ", ".join(f"{name}: {status or 'tried on earlier kernels'}"
                          for name, status in record.rewrites.items())
        rewrites = (f"every applicable rewrite was tried ({tried})" if tried
                    else "no rewrite in the library applies to this kernel")
        if not view.current.space:
            knobs = "it has no knobs to tune"
        elif record.tune_failures >= self.max_tune_failures:
            knobs = f"{record.tune_failures} tuned candidates failed, so its knobs are left as they are"
        elif record.untried_settings <= 0:
            knobs = f"all {record.settings_total} knob settings were tried"
        elif record.idle_tunes_in_a_row >= self.max_idle_tunes:
            knobs = (f"the tuner repeated settings already tried {record.idle_tunes_in_a_row} "
                     "times in a row")
        else:
            knobs = f"its knobs had {record.tune_trials} tuning trials"
        return f"Nothing left to do: {rewrites}, and {knobs}."
