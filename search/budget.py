"""Budgets and stopping rules of a lineage."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Budget:
    """Limits of one lineage; None means no limit."""

    candidates: int | None = None  # evaluated candidates (duplicates included)
    wall_s: float | None = None
    patience: int | None = None  # steps without improving the lineage's best
    target_speedup: float | None = None

    def stop_reason(self, *, candidates: int, wall_s: float, since_improvement: int,
                    best_speedup: float) -> str | None:
        """Why the lineage must stop now, or None."""
        if self.candidates is not None and candidates >= self.candidates:
            return f"candidate budget reached ({self.candidates})"
        if self.wall_s is not None and wall_s >= self.wall_s:
            return f"wall-time budget reached ({self.wall_s:g} s)"
        if self.target_speedup is not None and best_speedup >= self.target_speedup:
            return f"target speedup reached ({best_speedup:.3f}x >= {self.target_speedup:g}x)"
        if self.patience is not None and since_improvement >= self.patience:
            return f"no improvement in {self.patience} steps"
        return None
