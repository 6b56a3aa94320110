"""The live view of a knob study, and its closing table of best trials."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .progress import LiveView
from .speedups import speedup_text


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


@dataclass(frozen=True)
class TrialFigures:
    """One evaluated trial as the tables state it: its speedups over the starting kernel and
    over PyTorch eager, each with the half-width of its 95% interval (NaN: not recorded, e.g.
    a trial of a study made before the intervals were kept)."""

    number: int
    knobs: Mapping[str, Any]
    speedup: float
    speedup_ci: float
    vs_eager: float
    vs_eager_ci: float
    candidate_id: str

    @classmethod
    def of(cls, trial: Any) -> TrialFigures:
        """From an Optuna ``FrozenTrial`` told by ``KnobStudy``."""
        attrs = trial.user_attrs

        def number(value: Any) -> float:
            return math.nan if value is None else float(value)

        return cls(trial.number, dict(trial.params), number(trial.value),
                   number(attrs.get("speedup_vs_start_ci")),
                   number(attrs.get("speedup_vs_eager")),
                   number(attrs.get("speedup_vs_eager_ci")), attrs.get("candidate_id", "-"))

    @property
    def named(self) -> str:
        return f"trial {self.number} ({knobs_text(self.knobs)})"


def within_noise(a: TrialFigures, b: TrialFigures) -> bool:
    """Whether two trials' speedups differ by less than their timing noise: the difference
    inside the 95% interval of a difference of two independent estimates. False when either
    interval is unknown (nothing can be said either way)."""
    return (math.isfinite(a.speedup_ci) and math.isfinite(b.speedup_ci)
            and abs(a.speedup - b.speedup) <= math.hypot(a.speedup_ci, b.speedup_ci))


def noise_verdict(trials: Sequence[TrialFigures]) -> str:
    """What the ranking says of the first of ``trials`` (best first): "" when it is faster than
    every other beyond the timing noise and than the starting kernel, else a sentence saying
    which it is not told apart from."""
    if not trials:
        return ""
    best = trials[0]
    if not math.isfinite(best.speedup_ci):
        return (f"the spread of {best.named} is unknown (a shape was timed fewer than 4 "
                f"times): it is not known to be faster than the others, or than the starting "
                f"kernel, beyond the timing noise. Time longer (e.g. --set timing.min_repeats=10)"
                f" to know.")
    tied = [t.named for t in trials[1:] if within_noise(best, t)]
    against_start = math.isfinite(best.speedup_ci) and abs(best.speedup - 1.0) <= best.speedup_ci
    gain = f"{speedup_text(best.speedup, best.speedup_ci)} over the starting kernel"
    if tied:
        names = ", ".join(tied[:3]) + (f" and {len(tied) - 3} more" if len(tied) > 3 else "")
        text = (f"no setting is clearly the best: {best.named} is not faster than {names} "
                f"beyond the timing noise")
        if against_start:
            text += f", and its {gain} is inside the noise too (≈)"
    elif against_start:
        text = f"{best.named} is the fastest setting, but its {gain} is inside the noise (≈)"
    else:
        return ""
    return text + ". Time longer (e.g. --set timing.budget_s=1) to tell them apart."


def spread_text(value: float, ci: float) -> str:
    """``1.234x ±0.012`` (``≈``: the interval holds 1.0), ``1.234x ±?`` where the spread is
    unknown: a figure is never shown as if it had none."""
    text = speedup_text(value, ci, mark_noise=True)
    return text + " ±?" if text != "-" and not math.isfinite(ci) else text


def trials_table(trials: Sequence[TrialFigures], title: str) -> Table:
    """Trials best first: knobs, speedups with their 95% half-widths (``≈``: the interval
    holds 1.0), the candidate's id."""
    table = Table(title=escape(title))
    # "vs eager", as the run's tables say it: the speedup over PyTorch eager, not over every
    # baseline (on a CPU, torch.compile is not measured)
    for column in ("trial", "knobs", "vs start", "vs eager", "candidate"):
        table.add_column(column, no_wrap=column != "knobs",
                         justify="right" if column.startswith("vs") else "left")
    for trial in trials:
        table.add_row(str(trial.number), escape(knobs_text(trial.knobs)),
                      spread_text(trial.speedup, trial.speedup_ci),
                      spread_text(trial.vs_eager, trial.vs_eager_ci), trial.candidate_id)
    if not trials:
        table.add_row("-", "no trial has a correct kernel yet", "-", "-", "-")
    return table


def best_table(trials: Sequence[Any], study_name: str, others: Sequence[Any] = ()) -> Table:
    """The best trials (Optuna ``FrozenTrial``s), best first (``trials_table``); ``others``,
    the study's trials with no speedup (failed, or repeats of a setting), named in the caption
    so that no trial number goes missing unexplained."""
    table = trials_table([TrialFigures.of(t) for t in trials],
                         f"kernelswarm tune: best trials of {study_name}")
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
