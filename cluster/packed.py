"""Factories carried as their pickled bytes, unpickled only where they are called.

Unpickling an evaluator's factory (or a lineage's roles) imports what it builds with: torch, the
task's module, seconds of CPU. The dispatcher only stores evaluator factories and hands them to
workers, so it never unpickles them; a lineage actor unpickles its own once it has lowered its
priority (lineage_actor.py), so that those imports do not slow the evaluation worker's start.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import ray

T = TypeVar("T")


@dataclass(frozen=True)
class PackedFactory(Generic[T]):
    """A factory's pickled bytes; ``key`` names what it builds."""

    blob: bytes

    @classmethod
    def of(cls, factory: Callable[..., T]) -> PackedFactory[T]:
        return cls(ray.cloudpickle.dumps(factory))

    @property
    def key(self) -> str:
        """What a worker keys its evaluators by: factories that pickle to the same bytes (the
        same task, language and settings) build the same evaluator, so cells share one per
        worker and calibrate once (the baselines and the starting kernel timed once, not once
        per cell)."""
        return hashlib.sha256(self.blob).hexdigest()[:16]

    def unpack(self) -> Callable[..., T]:
        factory: Any = ray.cloudpickle.loads(self.blob)
        return factory
