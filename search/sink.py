"""Result sinks: where every evaluation is written."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .candidate import Candidate
from .evaluation import Evaluation


@dataclass(frozen=True)
class RunInfo:
    """What a sink knows of the run when it opens."""

    run_id: str
    name: str
    run_dir: Path
    task: str
    language: str
    lineages: int
    params: Mapping[str, Any] = field(default_factory=dict)  # flattened config


@dataclass(frozen=True)
class Record:
    """One evaluated candidate as the tracker accepted it."""

    seq: int  # position in the run's total order of records
    lineage: int
    step: int  # the lineage's step number
    candidate: Candidate
    evaluation: Evaluation
    lineage_best: float  # best speedup of the lineage after this record
    global_best: float
    wall_s: float  # seconds since the run started
    timestamp: float
    diversity: float = 0.0  # the archive's diversity after this record (Archive.diversity)


@dataclass(frozen=True)
class RunSummary:
    """What a sink is told when the run ends."""

    stop_reason: str
    records: int
    best: tuple[Candidate, Evaluation] | None
    lineage_best: Mapping[int, tuple[Candidate, Evaluation]]
    wall_s: float
    diversity: float = 0.0
    migrations: int = 0  # kernels moved between islands
    reused: int = 0  # verdicts reused for an identical compiled binary
    strategy: str = "islands"  # the search strategy (search/strategies/)
    rejected: int = 0  # candidates not judged: too close to a judged kernel (novelty)
    # The strategy's own figures at the end (Tracker.figures: kept kernels, their families,
    # cells, migrations, ...), by name.
    population: Mapping[str, Any] = field(default_factory=dict)
    # Screening (search/screening.py): candidates screened out, and the timing seconds their
    # untimed shapes would have taken at each one's own rate (an estimate).
    screened_out: int = 0
    screen_saved_s: float = 0.0


class Sink(ABC):
    """Receives the run's records in order.

    Contract: ``open`` once, then ``write`` (or ``write_batch``) for every record in ``seq``
    order, then ``close``.
    A sink with ``durable = True`` is written before the tracker acknowledges a record (it is the
    source of truth for resume); others are fed from a background thread and may lag. A sink that
    raises in ``write`` is reported and disabled; the records already written elsewhere stay.
    """

    durable: bool = False

    @abstractmethod
    def open(self, run: RunInfo) -> None: ...

    @abstractmethod
    def write(self, record: Record) -> None: ...

    def write_batch(self, records: Sequence[Record]) -> None:
        """Write several records, in ``seq`` order, as one unit where the sink can (one file,
        one round trip): what the tracker calls when records arrive faster than one at a time.
        The default writes them one by one."""
        for record in records:
            self.write(record)

    @abstractmethod
    def close(self, summary: RunSummary) -> None: ...

    def location(self) -> str:
        """Where a person finds what this sink wrote."""
        return ""
