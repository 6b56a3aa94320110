"""A knob study: Optuna ask/tell over one kernel's knob space, each setting evaluated once.

A knob setting always compiles to the same kernel, so its verdict is measured once per study.
When the sampler proposes a setting again (TPE does on categorical spaces), the new trial is
told the known verdict and marked ``duplicate_of`` (the sampler learns from it; counts of
*evaluated* settings leave it out), and an untried setting is enqueued for the next ask. A
setting proposed while it is being evaluated waits for that verdict. Settings told to the study
in an earlier session (a resumed run, or the same study in a shared storage) are known too.

User attributes of an evaluated trial: ``candidate_id``, ``status`` (an ``Evaluation`` status),
``message`` (for a failed one), ``speedup_vs_eager``, and per shape label ``time_us``,
``start_time_us`` and ``speedup_vs_start`` (dicts). A trial abandoned mid-evaluation (Ctrl-C
twice) is FAIL with ``status = "INTERRUPTED"``: it is no verdict, and the setting stays untried.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import optuna

from kernelswarm.search import Evaluation, Status
from kernelswarm.search.tuning import distributions

from .config import ConfigError

COMPLETE, FAIL, RUNNING = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL,
                           optuna.trial.TrialState.RUNNING)
INTERRUPTED = "INTERRUPTED"
VERDICTS = {s.value for s in Status}
ENUMERABLE = 65536  # spaces up to this many settings are listed to find an untried one
MAX_REPEATS = 32  # asks in a row that may repeat known settings before giving up
MESSAGE_LIMIT = 2000


class TuneError(ConfigError):
    """A tune that cannot start as asked; the message says what to change."""


class StudyMismatch(TuneError):
    """An existing study that tunes another kernel or space; the message says which."""


def kernel_fingerprint(language: str, source: str, space: Mapping[str, tuple[Any, ...]]) -> str:
    """What a study is about: the kernel's language, source and knob space."""
    payload = json.dumps([language, source, sorted((k, list(v)) for k, v in space.items())],
                         default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _key(params: Mapping[str, Any]) -> tuple:
    return tuple(sorted(params.items()))


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None  # JSON, so the storages, have no NaN


def evaluation_attrs(evaluation: Evaluation) -> dict[str, Any]:
    """The user attributes an evaluated trial carries."""
    attrs: dict[str, Any] = {"candidate_id": evaluation.candidate_id,
                             "status": evaluation.status.value}
    if not evaluation.ok:
        attrs["message"] = evaluation.message[:MESSAGE_LIMIT]
    if evaluation.shapes:
        attrs["speedup_vs_eager"] = _finite(evaluation.speedup_vs_eager)
        for name in ("time_us", "start_time_us", "speedup_vs_start"):
            attrs[name] = {s.shape: _finite(getattr(s, name)) for s in evaluation.shapes}
    return attrs


@dataclass(frozen=True)
class Verdict:
    """What the study knows of one setting: the trial that measured it and its value."""

    number: int
    value: float | None  # None: the setting failed
    status: str


def _verdict(trial: optuna.trial.FrozenTrial) -> Verdict | None:
    status = trial.user_attrs.get("status")
    number = trial.user_attrs.get("duplicate_of", trial.number)
    if trial.state == COMPLETE:
        return Verdict(number, trial.value, status or Status.OK.value)
    if trial.state == FAIL and status in VERDICTS:
        return Verdict(number, None, status)
    return None  # running, waiting, pruned, interrupted, or failed outside kernelswarm


@dataclass(frozen=True)
class Proposal:
    """A trial to evaluate: its number and knob values."""

    number: int
    params: dict[str, Any]


class KnobStudy:
    """One Optuna study over one kernel's knobs, driven by ask/tell from one thread.

    ``ask`` returns a setting not evaluated before (or None once none is left, or the sampler
    keeps repeating itself); ``tell`` records a verdict; ``abandon`` gives a trial up.
    """

    def __init__(self, study: optuna.Study, space: Mapping[str, tuple[Any, ...]],
                 seed: int = 0) -> None:
        self.study = study
        self.space = {k: tuple(v) for k, v in space.items()}
        self._dists = distributions(self.space)
        self._rng = random.Random(seed)
        self._open: dict[int, optuna.trial.Trial] = {}  # asked and being evaluated
        self._in_flight: dict[tuple, int] = {}  # setting -> the trial evaluating it
        self._waiting: dict[tuple, list[optuna.trial.Trial]] = {}  # repeats of an in-flight one
        self._known: dict[tuple, Verdict] = {}
        self.stop_reason = ""  # why ask last returned None
        self._refresh()

    def _refresh(self) -> None:
        """Take in the verdicts in the storage, those of other drivers on the study included."""
        for trial in self.study.get_trials(deepcopy=False, states=(COMPLETE, FAIL)):
            verdict = _verdict(trial)
            if verdict is not None:
                self._known.setdefault(_key(trial.params), verdict)

    @classmethod
    def open(cls, storage: Any, name: str, space: Mapping[str, tuple[Any, ...]],
             fingerprint: str, seed: int = 0, first: Mapping[str, Any] | None = None) -> KnobStudy:
        """Create the study ``name`` in ``storage``, or continue it if it tunes the same kernel
        (``fingerprint``); a new study evaluates ``first`` (the kernel as given) first."""
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=8, constant_liar=True)
        study = optuna.create_study(storage=storage, study_name=name, sampler=sampler,
                                    direction="maximize", load_if_exists=True)
        if study.direction != optuna.study.StudyDirection.MAXIMIZE:
            raise StudyMismatch(f"study {name!r} minimises; a knob study maximises the speedup: "
                                f"choose another --study-name")
        theirs = study.user_attrs.get("kernel")
        trials = study.get_trials(deepcopy=False)
        if theirs is None and trials:
            raise StudyMismatch(f"study {name!r} already holds {len(trials)} trials not made by "
                                f"kernelswarm tune: choose another --study-name")
        if theirs is not None and theirs != fingerprint:
            raise StudyMismatch(
                f"study {name!r} tunes another kernel or knob space (fingerprint {theirs}, this "
                f"one is {fingerprint}): choose another --study-name")
        if theirs is None:
            study.set_user_attr("kernel", fingerprint)
            study.set_user_attr("knob_space", {k: list(v) for k, v in space.items()})
            if first is not None:
                study.enqueue_trial(dict(first))
        else:  # a later session: its own sampler seed, so it does not replay the first's picks
            study.sampler = optuna.samplers.TPESampler(
                seed=seed + len(trials), n_startup_trials=8, constant_liar=True)
        return cls(study, space, seed)

    @property
    def evaluated(self) -> int:
        """Distinct settings with a verdict (any session)."""
        return len(self._known)

    def leader(self) -> tuple[int, dict[str, Any], float] | None:
        """The best setting known: (trial number, knob values, speedup), from memory."""
        scored = [(v.value, -v.number, key) for key, v in self._known.items()
                  if v.value is not None]
        if not scored:
            return None
        value, number, key = max(scored)
        return -number, dict(key), value

    def fail_stale(self) -> int:
        """Fail trials left RUNNING by a session that stopped without telling them (a crash);
        their settings stay untried. Only for a study no other process is running now."""
        stale = [t for t in self.study.get_trials(deepcopy=False, states=(RUNNING,))
                 if t.number not in self._open]
        for trial in stale:
            self.study.tell(trial.number, state=FAIL, skip_if_finished=True)
        return len(stale)

    def ask(self) -> Proposal | None:
        self._refresh()
        for _ in range(MAX_REPEATS):
            trial = self.study.ask(self._dists)
            key = _key(trial.params)
            if key in self._known:
                self._tell_repeat(trial, self._known[key])
            elif key in self._in_flight:
                self._waiting.setdefault(key, []).append(trial)
            else:
                self._open[trial.number] = trial
                self._in_flight[key] = trial.number
                return Proposal(trial.number, dict(trial.params))
            untried = self._untried()
            if untried is not None:
                if not untried:
                    self.stop_reason = "every knob setting has been evaluated"
                    return None
                self.study.enqueue_trial(untried[self._rng.randrange(len(untried))])
        self.stop_reason = (f"the sampler proposed only settings already evaluated, "
                            f"{MAX_REPEATS} times in a row")
        return None

    def _untried(self) -> list[dict[str, Any]] | None:
        """Settings neither evaluated nor in flight; None when the space is too large to list."""
        names = sorted(self.space)
        if math.prod(len(self.space[n]) for n in names) > ENUMERABLE:
            return None
        taken = self._known.keys() | self._in_flight.keys()
        settings = (dict(zip(names, values, strict=True))
                    for values in itertools.product(*(self.space[n] for n in names)))
        return [p for p in settings if _key(p) not in taken]

    def _tell_repeat(self, trial: optuna.trial.Trial, verdict: Verdict) -> None:
        trial.set_user_attr("duplicate_of", verdict.number)
        trial.set_user_attr("status", verdict.status)
        if verdict.value is None:
            self.study.tell(trial, state=FAIL)
        else:
            self.study.tell(trial, verdict.value)

    def tell(self, number: int, evaluation: Evaluation) -> Verdict:
        """Record the verdict on trial ``number``: its speedup, or FAIL with the status."""
        trial = self._open.pop(number)
        key = _key(trial.params)
        self._in_flight.pop(key, None)
        for name, value in evaluation_attrs(evaluation).items():
            trial.set_user_attr(name, value)
        value = evaluation.speedup
        if evaluation.ok and value > 0:
            self.study.tell(trial, value)
            verdict = Verdict(number, value, evaluation.status.value)
        else:
            self.study.tell(trial, state=FAIL)
            verdict = Verdict(number, None, evaluation.status.value)
        self._known[key] = verdict
        for repeat in self._waiting.pop(key, []):
            self._tell_repeat(repeat, verdict)
        return verdict

    def open_trials(self) -> list[int]:
        """Trials asked and not yet told."""
        return sorted(self._open)

    def abandon(self, number: int) -> None:
        """Give up trial ``number`` without a verdict (FAIL, status INTERRUPTED)."""
        trial = self._open.pop(number)
        key = _key(trial.params)
        self._in_flight.pop(key, None)
        for pending in [trial, *self._waiting.pop(key, [])]:
            pending.set_user_attr("status", INTERRUPTED)
            self.study.tell(pending, state=FAIL)

    def best(self, k: int) -> list[optuna.trial.FrozenTrial]:
        """The ``k`` best evaluated trials (repeats left out), best first."""
        done = [t for t in self.study.get_trials(deepcopy=False, states=(COMPLETE,))
                if "duplicate_of" not in t.user_attrs]
        return sorted(done, key=lambda t: (-t.value, t.number))[:k]
