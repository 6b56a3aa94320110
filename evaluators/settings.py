"""Settings of one evaluator: how hard it checks and how long it measures."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

CACHE_ENV = "KERNELSWARM_CACHE"


def default_cache_dir() -> Path:
    """``$KERNELSWARM_CACHE`` if set, else ``~/.cache/kernelswarm/compile``."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser()
    return Path.home() / ".cache" / "kernelswarm" / "compile"


@dataclass(frozen=True)
class EvaluatorSettings:
    """Frozen settings of a ``SandboxEvaluator``; invalid values raise ``ValueError`` naming the field.

    ``run_timeout_s`` bounds the whole run phase of one evaluation in the sandbox (correctness,
    held-out shapes and timing together); ``timing_budget_s`` is the soft budget of timing one
    shape (at least ``min_repeats`` rounds are always measured). ``memory_limit_mb`` caps the
    sandbox's address space (``RLIMIT_AS``), which includes torch itself: leave room for a few GB.
    """

    device: str = "cpu"
    cache_dir: Path = field(default_factory=default_cache_dir)
    compile_timeout_s: float = 60.0
    run_timeout_s: float = 30.0
    seeds: int = 3
    check_heldout: bool = True
    warmup: int = 3
    min_repeats: int = 10
    max_repeats: int = 200
    target_rel_se: float = 0.005
    timing_budget_s: float = 1.0
    flush_cache: bool = True
    memory_limit_mb: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.device, str) or not self.device:
            raise ValueError(f"EvaluatorSettings.device must be a device name such as 'cpu', "
                             f"got {self.device!r}")
        object.__setattr__(self, "cache_dir", Path(self.cache_dir).expanduser())
        for name in ("compile_timeout_s", "run_timeout_s", "timing_budget_s", "target_rel_se"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value <= 0:
                raise ValueError(f"EvaluatorSettings.{name} must be a positive number, got {value!r}")
        for name, low in (("seeds", 1), ("warmup", 0), ("min_repeats", 1), ("max_repeats", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"EvaluatorSettings.{name} must be an integer >= {low}, "
                                 f"got {value!r}")
        if self.max_repeats < self.min_repeats:
            raise ValueError(f"EvaluatorSettings.max_repeats ({self.max_repeats}) must be >= "
                             f"min_repeats ({self.min_repeats})")
        for name in ("check_heldout", "flush_cache"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"EvaluatorSettings.{name} must be True or False, "
                                 f"got {getattr(self, name)!r}")
        limit = self.memory_limit_mb
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 256):
            raise ValueError(f"EvaluatorSettings.memory_limit_mb must be None or an integer "
                             f">= 256 (the sandbox holds torch), got {limit!r}")
