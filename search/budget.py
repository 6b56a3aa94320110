"""Budgets and stopping rules of a lineage."""

from __future__ import annotations

from dataclasses import dataclass


class BudgetExpired(RuntimeError):
    """A candidate's verdict would come after its lineage's wall-time budget: it built after
    the deadline, or still waited for an evaluation worker then. It is not judged (nothing is
    recorded of it) and the lineage stops with this message."""


@dataclass(frozen=True)
class Spent:
    """What a lineage has used so far, as the budget reads it."""

    candidates: int = 0  # evaluated candidates (verdicts reused from other lineages included)
    wall_s: float = 0.0
    gpu_s: float = 0.0  # seconds its candidates occupied an evaluation worker
    tokens: int = 0  # model tokens of its roles (prompt + completion)
    cost_usd: float = 0.0
    since_improvement: int = 0  # evaluations since the lineage's best last improved
    best_speedup: float = 0.0


@dataclass(frozen=True)
class Budget:
    """Limits of one lineage; None means no limit. The first limit reached stops it."""

    candidates: int | None = None
    wall_s: float | None = None
    gpu_s: float | None = None
    tokens: int | None = None
    cost_usd: float | None = None
    patience: int | None = None  # steps without improving the lineage's best
    target_speedup: float | None = None

    def stop_reason(self, spent: Spent) -> str | None:
        """Why the lineage must stop now, or None."""
        if self.candidates is not None and spent.candidates >= self.candidates:
            return f"candidate budget reached ({self.candidates})"
        if self.wall_s is not None and spent.wall_s >= self.wall_s:
            return f"wall-time budget reached ({self.wall_s:g} s)"
        if self.gpu_s is not None and spent.gpu_s >= self.gpu_s:
            return (f"evaluation-time budget reached ({spent.gpu_s:.1f} s of "
                    f"{self.gpu_s:g} s on workers)")
        if self.tokens is not None and spent.tokens >= self.tokens:
            return f"token budget reached ({spent.tokens:,} of {self.tokens:,} tokens)"
        if self.cost_usd is not None and spent.cost_usd >= self.cost_usd:
            return f"money budget reached (${spent.cost_usd:.4f} of ${self.cost_usd:g})"
        if self.target_speedup is not None and spent.best_speedup >= self.target_speedup:
            return (f"target speedup reached ({spent.best_speedup:.3f}x >= "
                    f"{self.target_speedup:g}x)")
        if self.patience is not None and spent.since_improvement >= self.patience:
            return f"no improvement in {self.patience} steps"
        return None
