"""What a ``kernelswarm tune`` session leaves when it ends: ``best/<id>.<ext>``,
``summary.json``, the report (``report/``, logged to the session's MLflow run) and the closing
lines on the console."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from kernelswarm.cluster import write_activity
from kernelswarm.evaluators import TimingSettings
from kernelswarm.search import KnobStudy, RunSummary

from ..agent.llm_view import one_line
from ..run.compiler_messages import naming_in
from ..run.execute import write_best_kernel
from ..views.speedups import finite, kernel_figures
from ..views.tune_view import TrialFigures, best_table, noise_verdict, trial_outcome, within_noise


def dashboard_command(storage_text: str) -> str:
    """How to open the study in optuna-dashboard (it takes a journal file's path or a URL); it
    is no dependency of kernelswarm, so the hint says how to get it."""
    return f"optuna-dashboard {storage_text}  (pip install optuna-dashboard)"


@dataclass(frozen=True)
class TuneOutcome:
    run_dir: Path
    study: KnobStudy
    storage: str
    stop_reason: str
    evaluated: int  # new evaluations this session
    summary: RunSummary
    locations: list[str]
    sink_errors: list[str]
    best_path: Path | None
    utilisation: dict[str, float] = field(default_factory=dict)
    kernel_file: str = ""  # the tuned kernel's file, named in its compiler errors
    report: Path | None = None  # report/report.html, once written


def write_json(path: Path, doc: dict[str, Any]) -> None:
    """``doc`` as ``path``, atomically (a reader never sees half a file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str))
    tmp.replace(path)


def _trial_entry(figures: TrialFigures) -> dict[str, Any]:
    return {"trial": figures.number, "knobs": dict(figures.knobs),
            "speedup_vs_start": figures.speedup, "speedup_vs_start_ci": figures.speedup_ci,
            "speedup_vs_eager": figures.vs_eager, "speedup_vs_eager_ci": figures.vs_eager_ci,
            "candidate_id": figures.candidate_id}


def write_summary(outcome: TuneOutcome, session: Mapping[str, Any]) -> TuneOutcome:
    """``best/<id>.<ext>`` and ``summary.json``; the outcome with the best kernel's path.
    ``session``: what the session saw (task, language, device, statuses, activity)."""
    summary, study, run_dir = outcome.summary, outcome.study, outcome.run_dir
    best_path = None
    if summary.best is not None:
        best_path = write_best_kernel(run_dir, summary.best[0])
    top = [TrialFigures.of(t) for t in study.best(10)]
    timing = TimingSettings.read(run_dir)
    best = None
    if summary.best is not None:
        candidate, evaluation = summary.best
        mine = next((t for t in top if t.candidate_id == candidate.id), None)
        best = {"candidate_id": candidate.id, "trial": mine.number if mine else None,
                "knobs": candidate.knob_values, **kernel_figures(evaluation),
                # the trials it is not told apart from: naming it the best says little more
                "within_noise_of": [t.number for t in top if mine and t is not mine
                                    and within_noise(mine, t)],
                "file": str(best_path)}
    activity = session.get("activity")
    write_json(run_dir / "summary.json", finite({
        "stop_reason": outcome.stop_reason, "task": session.get("task"),
        "language": session.get("language"), "device": session.get("device"),
        "study": study.study.study_name,
        "storage": outcome.storage, "dashboard": dashboard_command(outcome.storage),
        "evaluated_this_session": outcome.evaluated,
        "statuses_this_session": dict(session.get("statuses", {})),
        "settings_evaluated": study.evaluated, "records": summary.records,
        "wall_s": summary.wall_s,
        "timing": {**timing.as_dict(), "regime": timing.regime},
        "best": best, "top_trials": [_trial_entry(t) for t in top],
        "sink_errors": outcome.sink_errors, "utilisation": outcome.utilisation,
        # busy by minute, evaluations a minute, calibrations, GPUs (workers.json: every trial's
        # worker and times; cluster/activity.py)
        "workers": write_activity(run_dir, activity) if activity else None}))
    return replace(outcome, best_path=best_path)


def write_report(outcome: TuneOutcome, mlflow: bool, console: Console) -> TuneOutcome:
    """The tune folder's report, logged to the session's MLflow run when ``mlflow``; a failure
    is printed, the study's results stand without it."""
    try:
        from .report import log_tune_report, write_tune_report

        report = write_tune_report(outcome.run_dir)
        if mlflow:
            log_tune_report(report, outcome.run_dir)
    except Exception as exc:  # the report reads what is on disk: the study itself succeeded
        console.print(f"[yellow]report not written:[/] {escape(one_line(str(exc)))}",
                      highlight=False)
        return outcome
    return replace(outcome, report=report.html)


def print_closing(console: Console, outcome: TuneOutcome) -> None:
    best = outcome.study.best(5)
    listed = {t.number for t in best}
    others = [t for t in outcome.study.study.get_trials(deepcopy=False)
              if t.number not in listed and t.state.is_finished()
              and (t.state.name == "FAIL" or "duplicate_of" in t.user_attrs)]
    console.print(best_table(best, outcome.study.study.study_name, others))
    verdict = noise_verdict([TrialFigures.of(t) for t in best])
    if verdict:  # the table's first row is no clear winner: said before anything names it
        console.print(f"[yellow]{escape(verdict)}[/]", highlight=False)
    failed = next((t for t in others if t.user_attrs.get("message")), None)
    if not best and failed is not None:  # what a user needs first: why nothing ran
        message = failed.user_attrs["message"]
        if outcome.kernel_file:
            message = naming_in(message, outcome.kernel_file)
        console.print(f"[red]trial {failed.number} {trial_outcome(failed)}:[/] "
                      f"{escape(message)}", highlight=False)
    for error in outcome.sink_errors:
        console.print(f"[red]{escape(error)}[/]", highlight=False)
    # Plain lines, never wrapped by the console: a terminal may wrap a path, never cut it.
    lines = [f"stopped: {outcome.stop_reason} ({outcome.evaluated} evaluated this session, "
             f"{outcome.study.evaluated} knob settings evaluated in the study)",
             f"study: {outcome.study.study.study_name} in {outcome.storage}",
             f"browse it: {dashboard_command(outcome.storage)}",
             *(f"results: {location}" for location in outcome.locations)]
    if outcome.best_path:
        lines.append(f"best kernel: {outcome.best_path} (its knob values at its top)")
    if outcome.report:
        lines.append(f"report: {outcome.report}")
    lines.append(f"continue: kernelswarm tune --resume {outcome.run_dir} --trials N")
    for line in lines:
        console.print(line, highlight=False, markup=False, soft_wrap=True)
