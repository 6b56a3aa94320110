"""One timing protocol for ``run``, ``eval`` and ``tune``: ``TimingSettings``.

A speedup is reproducible only when the kernel is timed the same way each time it is measured:
the same warm-up, the same stopping rule, the cache flushed or not, the same CUDA-graph
threshold and the same number of checked seeds. ``TimingSettings`` is that subset of
``EvaluatorSettings``; a run writes it to ``timing.json`` in its folder (and into summary.json),
and ``kernelswarm eval`` of a file from that folder reads it back, so that eval judges the file
as the run did. The baselines (evaluators/baselines/baselines.py) are timed under the same settings.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from ..settings import EvaluatorSettings

TIMING_FILE = "timing.json"


# The defaults are EvaluatorSettings' own, so that the two cannot drift apart.
_DEFAULT = {f.name: f.default for f in fields(EvaluatorSettings)}


@dataclass(frozen=True)
class TimingSettings:
    """How every kernel and baseline of a run is timed (names as in ``EvaluatorSettings``)."""

    warmup: int = _DEFAULT["warmup"]
    min_repeats: int = _DEFAULT["min_repeats"]
    max_repeats: int = _DEFAULT["max_repeats"]
    target_rel_se: float = _DEFAULT["target_rel_se"]
    timing_budget_s: float = _DEFAULT["timing_budget_s"]
    flush_cache: bool = _DEFAULT["flush_cache"]
    cuda_graph_below_us: float = _DEFAULT["cuda_graph_below_us"]
    seeds: int = _DEFAULT["seeds"]

    def __post_init__(self) -> None:
        # EvaluatorSettings validates every field; a TimingSettings it refuses is refused too.
        self.apply(EvaluatorSettings())

    @classmethod
    def of(cls, settings: EvaluatorSettings) -> TimingSettings:
        """The timing part of an evaluator's settings."""
        return cls(**{f.name: getattr(settings, f.name) for f in fields(cls)})

    def apply(self, settings: EvaluatorSettings) -> EvaluatorSettings:
        """``settings`` with these timing values (everything else kept)."""
        return replace(settings, **asdict(self))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> TimingSettings:
        """From ``as_dict``'s output; an unknown key raises ``ValueError`` naming it."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(doc) - known)
        if unknown:
            raise ValueError(f"{TIMING_FILE}: unknown timing keys {unknown}; known: "
                             f"{sorted(known)}")
        return cls(**doc)

    @property
    def regime(self) -> str:
        """The cache regime in words, for tables: what a kernel's input looks like when timed."""
        return "cold cache (flushed)" if self.flush_cache else "warm cache (not flushed)"

    def write(self, run_dir: Path) -> Path:
        """``run_dir/timing.json``; returns its path."""
        path = Path(run_dir) / TIMING_FILE
        path.write_text(json.dumps(self.as_dict(), indent=2) + "\n")
        return path

    @classmethod
    def read(cls, run_dir: Path) -> TimingSettings:
        """The settings a run recorded; ``FileNotFoundError`` when it recorded none."""
        path = Path(run_dir) / TIMING_FILE
        return cls.from_dict(json.loads(path.read_text()))
