"""The tune command's study: ``search.tuning.KnobStudy`` opened with errors that name the
command's options. The ask/tell rules live in ``search/tuning.py``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kernelswarm.search import KnobStudy, StudyMismatch

from ..config import ConfigError


class TuneError(ConfigError):
    """A tune that cannot start as asked; the message says what to change."""


def open_study(storage: Any, name: str, space: Mapping[str, tuple[Any, ...]],
               fingerprint: str, seed: int, first: Mapping[str, Any]) -> KnobStudy:
    """The study ``name`` in ``storage``, new or continued; a study of another kernel or space
    is a ``TuneError`` that says to pass another ``--study-name``."""
    try:
        return KnobStudy.open(storage, name, space, fingerprint, seed=seed, first=first)
    except StudyMismatch as exc:
        raise TuneError(f"{exc} (--study-name)") from None
