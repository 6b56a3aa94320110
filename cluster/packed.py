"""An evaluator factory carried as its pickled bytes through the processes that only pass it on.

Unpickling a factory imports what its evaluator imports (torch, the task's module: seconds of
CPU). The dispatcher only stores factories and hands them to workers, so it gets them packed:
the driver packs, the worker that builds the evaluator unpacks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import ray

from kernelswarm.search import Evaluator


@dataclass(frozen=True)
class PackedFactory:
    """An evaluator factory's pickled bytes; ``key`` names the evaluator it builds."""

    blob: bytes

    @classmethod
    def of(cls, make_evaluator: Callable[[], Evaluator]) -> PackedFactory:
        return cls(ray.cloudpickle.dumps(make_evaluator))

    @property
    def key(self) -> str:
        """What a worker keys its evaluators by: factories that pickle to the same bytes (the
        same task, language and settings) build the same evaluator, so cells share one per
        worker and calibrate once (the baselines and the starting kernel timed once, not once
        per cell)."""
        return hashlib.sha256(self.blob).hexdigest()[:16]

    def unpack(self) -> Callable[[], Evaluator]:
        return ray.cloudpickle.loads(self.blob)
