"""Optuna ask/tell over a candidate's knobs."""

from __future__ import annotations

import itertools
import logging
import math
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna

optuna.logging.set_verbosity(optuna.logging.WARNING)
logging.getLogger("optuna").setLevel(logging.WARNING)


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


ENUMERABLE = 4096  # knob spaces up to this many settings are enumerated when the sampler repeats
MAX_REPEATS = 16


def _key(params: Mapping[str, Any]) -> tuple:
    return tuple(sorted(params.items()))


class KnobTuner:
    """One Optuna study per knob family (a source with its knob space), asked and told explicitly.

    ``storage`` is an Optuna storage (None: in memory). Studies are named
    ``{prefix}{family}`` so that one storage holds every lineage's studies.
    """

    def __init__(self, seed: int, storage: Any = None, prefix: str = "") -> None:
        self._seed = seed
        self._storage = storage
        self._prefix = prefix
        self._studies: dict[str, optuna.Study] = {}
        self._trials: dict[tuple[str, int], optuna.trial.Trial] = {}
        self._rng = random.Random(seed)

    def _study(self, family: str) -> optuna.Study:
        if family not in self._studies:
            sampler = optuna.samplers.TPESampler(seed=self._seed + len(self._studies),
                                                 n_startup_trials=4)
            self._studies[family] = optuna.create_study(
                study_name=f"{self._prefix}{family}", storage=self._storage, sampler=sampler,
                direction="maximize", load_if_exists=True)
        return self._studies[family]

    def ask(self, family: str,
            space: Mapping[str, tuple[Any, ...]]) -> tuple[int, dict[str, Any]] | None:
        """A trial number and knob values not tried before in this family; None once every
        setting has been tried.

        A knob setting always compiles to the same kernel, so a setting the sampler proposes
        again is answered from the study (the sampler learns from it) and an untried one is
        handed out instead.
        """
        study = self._study(family)
        dists = distributions(space)
        for _ in range(MAX_REPEATS):
            trial = study.ask(dists)
            key = _key(trial.params)
            earlier = self._finished(study, key, trial.number)
            if earlier is None:
                self._trials[(family, trial.number)] = trial
                return trial.number, dict(trial.params)
            if earlier.state == optuna.trial.TrialState.COMPLETE:
                study.tell(trial, earlier.value)
            else:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            untried = self._untried(study, space)
            if untried is None:
                continue  # too many settings to list: ask the sampler again
            if not untried:
                return None
            study.enqueue_trial(untried[self._rng.randrange(len(untried))])
        return None

    @staticmethod
    def _finished(study: optuna.Study, key: tuple, number: int) -> optuna.trial.FrozenTrial | None:
        for trial in study.get_trials(deepcopy=False):
            if trial.number != number and trial.state.is_finished() and _key(trial.params) == key:
                return trial
        return None

    @staticmethod
    def _untried(study: optuna.Study, space: Mapping[str, tuple[Any, ...]]) -> list[dict] | None:
        names = sorted(space)
        if math.prod(len(space[n]) for n in names) > ENUMERABLE:
            return None
        tried = {_key(t.params) for t in study.get_trials(deepcopy=False)}
        settings = (dict(zip(names, values, strict=True))
                    for values in itertools.product(*(space[n] for n in names)))
        return [p for p in settings if _key(p) not in tried]

    def tell(self, family: str, number: int, value: float | None) -> None:
        """Report a trial: its speedup, or None when the candidate failed."""
        trial = self._trials.pop((family, number), None)
        if trial is None:
            return
        study = self._study(family)
        if value is None or not value > 0:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, value)

    def trials(self, family: str) -> int:
        return len(self._study(family).trials) if family in self._studies else 0
