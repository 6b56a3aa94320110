"""Optuna ask/tell over a candidate's knobs."""

from __future__ import annotations

import logging
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

    def _study(self, family: str) -> optuna.Study:
        if family not in self._studies:
            sampler = optuna.samplers.TPESampler(seed=self._seed + len(self._studies),
                                                 n_startup_trials=4)
            self._studies[family] = optuna.create_study(
                study_name=f"{self._prefix}{family}", storage=self._storage, sampler=sampler,
                direction="maximize", load_if_exists=True)
        return self._studies[family]

    def ask(self, family: str, space: Mapping[str, tuple[Any, ...]]) -> tuple[int, dict[str, Any]]:
        """A trial number and the knob values to try."""
        study = self._study(family)
        trial = study.ask(distributions(space))
        self._trials[(family, trial.number)] = trial
        return trial.number, dict(trial.params)

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
