"""The live view of a knob study, and its closing table of best trials."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .progress import LiveView


def knobs_text(params: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(params.items()))


def _status_line(stats: Mapping[str, Any], elapsed: float) -> str:
    counts = ", ".join(f"{k} {v}" for k, v in sorted(stats.get("statuses", {}).items()))
    busy = stats.get("utilisation", {}).get("busy_fraction", 0.0)
    best = stats.get("best")
    best_text = f"best {best[2]:.3f}x (trial {best[0]}: {knobs_text(best[1])})" if best else "best -"
    return (f"{elapsed:6.1f}s  trials {stats.get('evaluated', 0)}/{stats.get('trials', 0)}  "
            f"in flight {stats.get('in_flight', 0)}  [{counts}]  {best_text}  "
            f"workers busy {busy:.0%}")


def progress_table(stats: Mapping[str, Any], elapsed: float) -> Group:
    table = Table(box=None, pad_edge=False)
    for column in ("trial", "knobs", "verdict", "speedup"):
        table.add_column(column, justify="right" if column in ("trial", "speedup") else "left")
    for number, params, status, speedup in stats.get("recent", []):
        table.add_row(str(number), escape(knobs_text(params)), status,
                      f"{speedup:.3f}x" if status == "OK" else "-")
    return Group(Text(_status_line(stats, elapsed), style="bold"), table)


def study_view(console: Console, every_s: float = 10.0) -> LiveView:
    """The live view of a knob study."""
    return LiveView(console, progress_table, _status_line, every_s)


def best_table(trials: Sequence[Any], study_name: str, others: Sequence[Any] = ()) -> Table:
    """The best trials (Optuna ``FrozenTrial``s), best first: knobs and speedups; ``others``,
    the study's trials with no speedup (failed, or repeats of a setting), named in the caption
    so that no trial number goes missing unexplained."""
    table = Table(title=escape(f"kernelswarm tune: best trials of {study_name}"))
    for column in ("trial", "knobs", "vs start", "vs PyTorch", "candidate"):
        table.add_column(column, no_wrap=column != "knobs")
    for trial in trials:
        eager = trial.user_attrs.get("speedup_vs_eager")
        table.add_row(str(trial.number), escape(knobs_text(trial.params)), f"{trial.value:.3f}x",
                      f"{eager:.3f}x" if eager is not None else "-",
                      trial.user_attrs.get("candidate_id", "-"))
    if not trials:
        table.add_row("-", "no trial has a correct kernel yet", "-", "-", "-")
    if others:
        table.caption = escape("not listed: " + ", ".join(
            f"trial {t.number} ({trial_outcome(t)})" for t in others[:8])
            + (f" and {len(others) - 8} more" if len(others) > 8 else ""))
    return table


def trial_outcome(trial: Any) -> str:
    """Why a trial has no place in the best table: its status, or the trial it repeats."""
    repeats = trial.user_attrs.get("duplicate_of")
    if repeats is not None:
        return f"repeats trial {repeats}"
    return str(trial.user_attrs.get("status") or trial.state.name)
