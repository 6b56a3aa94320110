"""Optuna ask/tell over a kernel's knobs, each knob setting evaluated once per study.

A knob setting always compiles to the same kernel, so its verdict is measured once per study.
When the sampler proposes a setting again (TPE does on categorical spaces), the new trial is
told the known verdict and marked ``duplicate_of`` (the sampler learns from it; counts of
*evaluated* settings leave it out), and an untried setting is enqueued for the next ask. A
setting proposed while it is being evaluated waits for that verdict. Settings told to the study
in an earlier session (a resumed run, or another driver on the same storage) are known too.

``KnobStudy`` is one study (``kernelswarm tune`` drives one); ``KnobTuner`` keeps a lineage's
studies, one per study key (a source with its knob space: ``lineage.study_key``).

User attributes of an evaluated trial: ``candidate_id``, ``status`` (an ``Evaluation`` status,
or ``FAILED`` when the caller told only that it failed), ``message`` (for a failed one),
``speedup_vs_eager``, and per shape label ``time_us``, ``start_time_us`` and
``speedup_vs_start`` (dicts). A trial abandoned mid-evaluation is FAIL with
``status = "INTERRUPTED"``: it is no verdict, and the setting stays untried.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from .evaluation import Evaluation, Status

optuna.logging.set_verbosity(optuna.logging.WARNING)
logging.getLogger("optuna").setLevel(logging.WARNING)

COMPLETE, FAIL, RUNNING = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL,
                           optuna.trial.TrialState.RUNNING)
ENUMERABLE = 65536  # spaces up to this many settings are listed to find an untried one
MAX_REPEATS = 32  # asks in a row that may repeat known settings before giving up
STARTUP_TRIALS = 8  # random settings before TPE models the space
MESSAGE_LIMIT = 2000
INTERRUPTED = "INTERRUPTED"
FAILED = "FAILED"  # a failure told without its status (a lineage tells only the speedup)
VERDICTS = {s.value for s in Status} | {FAILED}


class StudyMismatch(ValueError):
    """An existing study that tunes another kernel or space; the message says which."""


def distributions(space: Mapping[str, tuple[Any, ...]]) -> dict[str, optuna.distributions.BaseDistribution]:
    """Knob space -> Optuna distributions. Knob values are discrete choices, kept categorical."""
    out = {}
    for name, values in space.items():
        if not values:
            raise ValueError(f"knob {name!r} has no allowed values")
        out[name] = optuna.distributions.CategoricalDistribution(tuple(values))
    return out


def journal_storage(path: str | Path) -> optuna.storages.JournalStorage:
    """An Optuna storage in a journal file; several processes may share it, and
    optuna-dashboard opens it."""
    from optuna.storages.journal import JournalFileBackend

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.JournalStorage(JournalFileBackend(str(path)))


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
        # 95% half-widths: two settings whose figures differ by less are not told apart
        attrs["speedup_vs_start_ci"] = _finite(evaluation.geomean_ci("speedup_vs_start"))
        attrs["speedup_vs_eager_ci"] = _finite(evaluation.geomean_ci("speedup_vs_eager"))
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


def _sampler(seed: int) -> optuna.samplers.TPESampler:
    # constant_liar: trials in flight count as tried, so parallel asks spread out
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=STARTUP_TRIALS,
                                      constant_liar=True)


class KnobStudy:
    """One Optuna study over one kernel's knobs, driven by ask/tell from one thread.

    ``ask`` returns a setting not evaluated before (or None once none is left, or the sampler
    keeps repeating itself; ``stop_reason`` says which); ``tell`` records a verdict;
    ``abandon`` gives a trial up. Other drivers may share the storage: their verdicts are taken
    in before each ask.
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
             fingerprint: str | None = None, seed: int = 0,
             first: Mapping[str, Any] | None = None) -> KnobStudy:
        """Create the study ``name`` in ``storage`` (None: in memory), or continue it.

        With a ``fingerprint`` (``kernel_fingerprint``), an existing study must tune the same
        kernel, else ``StudyMismatch``; a new study evaluates ``first`` (the kernel as given)
        first. Without one, the name alone identifies the study.
        """
        study = optuna.create_study(storage=storage, study_name=name, sampler=_sampler(seed),
                                    direction="maximize", load_if_exists=True)
        if study.direction != optuna.study.StudyDirection.MAXIMIZE:
            raise StudyMismatch(f"study {name!r} minimises; a knob study maximises the speedup: "
                                f"choose another study name")
        trials = study.get_trials(deepcopy=False)
        if fingerprint is not None:
            _check_fingerprint(study, name, fingerprint, len(trials))
            if "kernel" not in study.user_attrs:
                study.set_user_attr("kernel", fingerprint)
                study.set_user_attr("knob_space", {k: list(v) for k, v in space.items()})
        if not trials and first is not None:
            study.enqueue_trial(dict(first))
        if trials:  # a later session: its own sampler seed, so it does not replay the first's
            study.sampler = _sampler(seed + len(trials))
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
        """A setting to evaluate that is neither evaluated nor in flight, or None."""
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
        value = evaluation.speedup if evaluation.ok else None
        return self._settle(number, value, evaluation.status.value,
                            evaluation_attrs(evaluation))

    def tell_speedup(self, number: int, speedup: float | None) -> Verdict:
        """Record a verdict known only by its speedup (None: the setting failed)."""
        ok = speedup is not None and speedup > 0
        return self._settle(number, speedup if ok else None, Status.OK.value if ok else FAILED,
                            {})

    def _settle(self, number: int, value: float | None, status: str,
                attrs: dict[str, Any]) -> Verdict:
        trial = self._open.pop(number)
        key = _key(trial.params)
        self._in_flight.pop(key, None)
        for name, attr in {"status": status, **attrs}.items():
            trial.set_user_attr(name, attr)
        if value is not None and value > 0:
            self.study.tell(trial, value)
            verdict = Verdict(number, value, status)
        else:
            self.study.tell(trial, state=FAIL)
            verdict = Verdict(number, None, status)
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


def _check_fingerprint(study: optuna.Study, name: str, fingerprint: str, trials: int) -> None:
    theirs = study.user_attrs.get("kernel")
    if theirs is None and trials:
        raise StudyMismatch(f"study {name!r} already holds {trials} trials not made by "
                            f"kernelswarm: choose another study name")
    if theirs is not None and theirs != fingerprint:
        raise StudyMismatch(
            f"study {name!r} tunes another kernel or knob space (fingerprint {theirs}, this "
            f"one is {fingerprint}): choose another study name")


class KnobTuner:
    """A lineage's knob studies: one ``KnobStudy`` per study key (a source with its knob space),
    named ``{prefix}{key}`` so that one storage holds every lineage's studies.

    ``storage`` is an Optuna storage (None: in memory). Used by one lineage (one thread).
    """

    def __init__(self, seed: int, storage: Any = None, prefix: str = "") -> None:
        self._seed = seed
        self._storage = storage
        self._prefix = prefix
        self._studies: dict[str, KnobStudy] = {}

    def _study(self, key: str, space: Mapping[str, tuple[Any, ...]]) -> KnobStudy:
        if key not in self._studies:
            self._studies[key] = KnobStudy.open(self._storage, f"{self._prefix}{key}", space,
                                                seed=self._seed + len(self._studies))
        return self._studies[key]

    def ask(self, key: str,
            space: Mapping[str, tuple[Any, ...]]) -> tuple[int, dict[str, Any]] | None:
        """A trial number and knob values not tried before in the study ``key``; None once
        every setting has been tried (or the sampler keeps repeating itself)."""
        proposal = self._study(key, space).ask()
        return None if proposal is None else (proposal.number, proposal.params)

    def tell(self, key: str, number: int, value: float | None) -> None:
        """Report a trial: its speedup, or None when the candidate failed (or was no new
        candidate). A trial this tuner did not hand out is ignored."""
        study = self._studies.get(key)
        if study is not None and number in study.open_trials():
            study.tell_speedup(number, value)

    def trials(self, key: str) -> int:
        """Trials of the study ``key``, repeats included (0 for a study never asked)."""
        study = self._studies.get(key)
        return len(study.study.trials) if study is not None else 0
