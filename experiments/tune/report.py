"""The report of a ``kernelswarm tune`` run folder: what was tuned, on which device, under
which timing regime, and every trial recorded in the folder with its spread.

A tune folder has the files of a run folder (``evaluations/``, ``config.json``), but no
lineages, no starting-kernel record and a summary of its own; ``kernelswarm report`` and the
tune command write this page for it instead of a run's. Like every report it states what was
recorded (Parquet, the source of truth, and ``summary.json``): nothing here measures anything.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelswarm.evaluators import TimingSettings
from kernelswarm.search import Evaluation, ShapeResult, Status

from ..report import plots
from ..report.writer import REPORT_FOLDER, Report
from ..report.writer import _Page as Page  # the run report's page builder (HTML + markdown)
from ..run.resume import _shape as shape_result  # a Parquet row as resume reads it
from ..sinks import read_evaluations
from ..views.speedups import compact_labels
from ..views.tune_view import TrialFigures, knobs_text, noise_verdict, spread_text
from .folder import TUNE_FILE, is_tune_folder


@dataclass(frozen=True)
class FailedTrial:
    number: int
    knobs: dict[str, Any]
    status: str
    message: str


@dataclass(frozen=True)
class TuneData:
    """A tune folder as its report reads it."""

    run_dir: Path
    config: dict[str, Any]
    tune: dict[str, Any]  # tune.json: the kernel's origin, the knob space, the study
    summary: dict[str, Any]
    trials: tuple[TrialFigures, ...]  # the correct ones, fastest first
    failed: tuple[FailedTrial, ...]
    best_shapes: tuple[ShapeResult, ...]
    best_source: str
    device: str
    regime: str

    @property
    def task(self) -> str:
        return Path(str(self.config.get("task", {}).get("name", "?"))).name

    @property
    def language(self) -> str:
        return str(self.config.get("task", {}).get("language", "?"))


def _regime(run_dir: Path, summary: dict[str, Any]) -> str:
    try:
        return TimingSettings.read(run_dir).regime
    except (FileNotFoundError, KeyError, TypeError, ValueError):
        timing = summary.get("timing") or {}
        return timing.get("regime") or "timing regime not recorded"


def _records(run_dir: Path) -> list[tuple[dict[str, Any], Evaluation]]:
    """Each record's first row and its verdict, rebuilt from its rows, in seq order."""
    groups: dict[int, list[dict[str, Any]]] = {}
    for row in read_evaluations(run_dir).to_pylist():
        groups.setdefault(int(row["seq"]), []).append(row)
    records = []
    for seq in sorted(groups):
        first = groups[seq][0]
        shapes = tuple(shape_result(r) for r in groups[seq] if r["shape"])
        records.append((first, Evaluation(first["candidate_id"], Status(first["status"]),
                                          first["message"] or "", shapes=shapes,
                                          device=first["device"] or "")))
    return records


def _figures(row: dict[str, Any], evaluation: Evaluation) -> TrialFigures:
    return TrialFigures(int(row["step"]), json.loads(row["knobs"] or "{}"), evaluation.speedup,
                        evaluation.geomean_ci("speedup_vs_start"), evaluation.speedup_vs_eager,
                        evaluation.geomean_ci("speedup_vs_eager"), evaluation.candidate_id)


def _source(run_dir: Path, candidate_id: str) -> str:
    for folder in ("best", "candidates"):
        found = sorted((run_dir / folder).glob(f"{candidate_id}.*"))
        if found:
            return found[0].read_text()
    return ""


def load_tune(run_dir: str | Path) -> TuneData:
    """Everything the report of the tune folder ``run_dir`` shows."""
    folder = Path(run_dir).resolve()
    if not is_tune_folder(folder):
        raise FileNotFoundError(f"{folder} is not a kernelswarm tune run folder (no {TUNE_FILE} "
                                f"and config.json in it)")
    summary_path = folder / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    records = _records(folder) if (folder / "evaluations").is_dir() else []
    ok = sorted(((r, e) for r, e in records if e.ok), key=lambda x: (-x[1].speedup, x[0]["step"]))
    failed = tuple(FailedTrial(int(r["step"]), json.loads(r["knobs"] or "{}"), e.status.value,
                               e.message) for r, e in records if not e.ok)
    best = ok[0][1] if ok else None
    return TuneData(
        run_dir=folder, config=json.loads((folder / "config.json").read_text()),
        tune=json.loads((folder / TUNE_FILE).read_text()), summary=summary,
        trials=tuple(_figures(r, e) for r, e in ok), failed=failed,
        best_shapes=best.shapes if best else (),
        best_source=_source(folder, best.candidate_id) if best else "",
        device=next((e.device for _, e in records if e.device), "")
        or summary.get("device") or "?", regime=_regime(folder, summary))


def _space_text(space: dict[str, list[Any]]) -> str:
    return ", ".join(f"{k} in {{{', '.join(map(str, v))}}}" for k, v in sorted(space.items()))


def headline(data: TuneData) -> str:
    """The report's first line: what was tuned, where, how it was timed, how it ended."""
    summary = data.summary
    known = summary.get("settings_evaluated")
    study = f" ({known} knob settings evaluated in the study)" if known is not None else ""
    return (f"Knob study of {data.tune.get('kernel_file', '?')} for task {data.task} "
            f"({data.language}) on {data.device} · {_space_text(data.tune.get('knob_space', {}))}"
            f" · {len(data.trials) + len(data.failed)} trials recorded in this folder{study}"
            f" in {summary.get('wall_s', math.nan):.0f} s · stopped: "
            f"{summary.get('stop_reason', 'not recorded (the session did not end)')}"
            f" · timed with a {data.regime}.")


def _trial_plot(data: TuneData) -> str:
    figure, axes = plots.plt.subplots(figsize=(7, 0.4 * max(len(data.trials), 2) + 1))
    ordered = sorted(data.trials, key=lambda t: t.speedup)
    labels = [f"{t.number}: {knobs_text(t.knobs)}" for t in ordered]
    errors = [t.speedup_ci if math.isfinite(t.speedup_ci) else 0.0 for t in ordered]
    axes.errorbar([t.speedup for t in ordered], range(len(ordered)), xerr=errors, fmt="o",
                  color=plots.BASELINE_COLOURS["best kernel"], capsize=3)
    axes.axvline(1.0, color=plots.BASELINE_COLOURS["start"], linestyle="--", label="start")
    axes.set_yticks(range(len(ordered)), labels)
    axes.set_xlabel("speedup over the starting kernel (95% interval)")
    axes.legend(loc="lower right")
    return plots._svg(figure)


def _shape_rows(shapes: tuple[ShapeResult, ...]) -> list[list[str]]:
    labels, _ = compact_labels([s.shape for s in shapes])
    rows = []
    for s in shapes:
        rows.append([labels[s.shape], f"{s.time_us:.2f} ±{s.time_spread_us:.2f}",
                     f"{s.start_time_us:.2f}" if s.start_time_us > 0 else "-",
                     f"{s.eager_time_us:.2f}" if s.eager_time_us > 0 else "-",
                     spread_text(s.speedup_vs_start, s.speedup_vs_start_ci),
                     spread_text(s.speedup_vs_eager, s.speedup_vs_eager_ci)])
    return rows


def tune_page(data: TuneData) -> Page:
    page = Page(f"kernelswarm tune report: {data.run_dir.name}")
    page.text(headline(data))
    study = data.tune.get("study_name") or data.summary.get("study", "?")
    if data.summary.get("storage"):
        page.text(f"Study {study} in {data.summary['storage']}; browse it: "
                  f"{data.summary.get('dashboard', '')}")
    page.heading("Trials")
    page.text("Every trial recorded in this folder, fastest first; ± is the half-width of the "
              "95% interval (±?: unknown, a shape timed fewer than 4 times), ≈ marks a figure "
              "whose interval holds 1.0 (no faster or slower than the starting kernel, or than "
              "eager, within the timing noise).")
    rows = [[str(t.number), knobs_text(t.knobs), "OK", spread_text(t.speedup, t.speedup_ci),
             spread_text(t.vs_eager, t.vs_eager_ci), t.candidate_id] for t in data.trials]
    rows += [[str(f.number), knobs_text(f.knobs), f.status, "-", "-",
              f.message.splitlines()[0][:120] if f.message else ""] for f in data.failed]
    page.table(["trial", "knobs", "verdict", "vs start", "vs eager", "candidate / why"], rows)
    verdict = noise_verdict(data.trials)
    if verdict:
        page.text(verdict)
    elif len(data.trials) > 1:
        page.text(f"Trial {data.trials[0].number} is faster than every other trial beyond the "
                  f"timing noise.")
    if data.trials:
        page.plot("trials", _trial_plot(data),
                  "Each correct trial's speedup over the starting kernel with its 95% interval.")
        best = data.trials[0]
        page.heading(f"Best trial: {best.number} ({knobs_text(best.knobs)})")
        page.table(["shape", "µs", "start µs", "eager µs", "× start", "× eager"],
                   _shape_rows(data.best_shapes))
        file = (data.summary.get("best") or {}).get("file")
        if file:
            page.text(f"File: {file}")
        page.heading(f"Best kernel source ({best.candidate_id})")
        page.code(data.best_source, data.language)
    return page


def write_tune_report(run_dir: str | Path) -> Report:
    """Write the report of a tune folder into ``<run_dir>/report/``."""
    data = load_tune(run_dir)
    return tune_page(data).write(data.run_dir / REPORT_FOLDER)


def tune_description(data: TuneData) -> str:
    """The MLflow parent run's description: the best trial with its spread, the noise verdict."""
    if not data.trials:
        return (f"**{data.task}**: no trial has a correct kernel. Stopped: "
                f"{data.summary.get('stop_reason', '?')}.")
    best = data.trials[0]
    lines = [f"**{data.task}** ({data.language}, {data.device}): best trial {best.number} "
             f"({knobs_text(best.knobs)}), {spread_text(best.speedup, best.speedup_ci)} vs the "
             f"starting kernel, {spread_text(best.vs_eager, best.vs_eager_ci)} vs eager, "
             f"timed with a {data.regime}."]
    verdict = noise_verdict(data.trials)
    if verdict:
        lines += ["", verdict]
    lines += ["", f"The whole report: artifacts, `{REPORT_FOLDER}/report.html`."]
    return "\n".join(lines)


def log_tune_report(report: Report, run_dir: Path) -> str:
    """Log the report to the session's MLflow parent run (its files under ``report/``, its
    description); returns the run's id, or "" when the tune logged nothing to MLflow."""
    from ..report.writer import DESCRIPTION_TAG
    from ..sinks.mlflow_runs import find_parent_run
    from ..sinks.mlflow_store import absolute_uri, mlflow_client

    data = load_tune(run_dir)
    tracking = data.config.get("tracking", {})
    if not tracking.get("mlflow"):
        return ""
    uri = absolute_uri(tracking["mlflow_uri"])
    found = find_parent_run(uri, tracking.get("experiment") or data.config["run"]["name"],
                            data.run_dir.name, str(data.run_dir))
    if found is None:
        return ""
    client = mlflow_client(uri)
    client.log_artifacts(found[0], str(report.html.parent), REPORT_FOLDER)
    client.set_tag(found[0], DESCRIPTION_TAG, tune_description(data))
    return found[0]
