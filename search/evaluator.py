"""The contract between the search and whatever judges candidates."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Protocol

from .candidate import Candidate
from .evaluation import Evaluation, Status
from .screening import Screen


@dataclass(frozen=True)
class CompileResult:
    """Outcome of building a candidate. ``ok`` False carries the compiler's (trimmed) log."""

    candidate_id: str
    ok: bool
    seconds: float
    log: str = ""
    cached: bool = False
    rejected: bool = False  # refused by the static screen rather than by the compiler
    # Hash of the built artifact and of the knob values a launcher may read: equal hashes run
    # the same machine code the same way, so one verdict serves both ("" when not built).
    binary: str = ""

    def as_evaluation(self) -> Evaluation:
        """The verdict for a candidate that failed to build (no GPU time spent on it)."""
        if self.ok:
            raise ValueError("a successful compile is not a verdict; evaluate the candidate")
        status = Status.REJECTED if self.rejected else Status.COMPILE_ERROR
        return Evaluation(self.candidate_id, status, self.log, compile_s=self.seconds)


class Evaluator(ABC):
    """Judges candidates of one task in one kernel language on one device.

    Contract:
    - ``evaluate`` never raises because of the candidate: a kernel that does not compile, crashes,
      hangs, cheats or is wrong yields an ``Evaluation`` with the matching ``Status`` and a message
      a person can act on. Exceptions mean a bug or a broken environment, or a task whose own
      starting kernel fails the same way: ``StartingKernelFailed``, carrying the starting
      kernel's verdict, whichever candidate was asked about (nothing can be compared with it).
    - Candidate code never runs in the calling process.
    - ``compile`` may run anywhere with CPUs (a compile pool); its results are cached by content
      hash so that a later ``evaluate`` of the same candidate does not build again.
    - An instance is used by one thread at a time.
    """

    @abstractmethod
    def compile(self, candidate: Candidate) -> CompileResult: ...

    @abstractmethod
    def evaluate(self, candidate: Candidate) -> Evaluation: ...

    def evaluate_on(self, candidate: Candidate, seeds: tuple[int, ...]) -> Evaluation:
        """``evaluate``, with correctness checked on ``seeds`` instead of the evaluator's own:
        a confirmation's secret seeds (search/confirm.py). The evaluation records the seeds it
        was checked on in ``metrics["check_seeds"]`` (``CHECK_SEEDS``). This default, for an evaluator that draws
        no inputs of its own, judges as ``evaluate`` does and records none: the confirmation
        then says its kernels were not checked on the secret seeds."""
        return self.evaluate(candidate)

    def evaluate_screened(self, candidate: Candidate, screen: Screen) -> Evaluation:
        """``evaluate``, timing ``screen.shapes`` first and stopping there with a
        ``SCREENED_OUT`` verdict when ``screen.drops`` the candidate (search/screening.py).
        This default, for an evaluator that cannot stop part-way, judges in full: its verdict
        is the one ``evaluate`` gives."""
        return self.evaluate(candidate)

    def prepare(self) -> dict[str, str]:
        """Get ready to judge ahead of the first candidate (the sandboxed judge calibrates, or
        reads its calibration, and starts its first runner), so that an idle evaluation worker
        can do it before a candidate waits for it; what was done, in words per item (empty:
        nothing to do). ``evaluate`` does the same on its own when this was not called."""
        return {}

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release processes and files; safe to call twice. The evaluator is not to be used
        afterwards: what it does then is the implementation's (the sandboxed judge starts a
        new runner), not a contract."""


class Compiler(Protocol):
    """What a compile pool needs of an evaluator: ``compile`` (the contract's, cached by
    content hash so that the evaluator finds the build) and ``close``. Every ``Evaluator`` is
    one; an evaluator may offer a lighter one that builds without what judging needs."""

    def compile(self, candidate: Candidate) -> CompileResult: ...

    def close(self) -> None: ...
