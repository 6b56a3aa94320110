"""``kernelswarm report``: one self-contained HTML file (and a markdown twin) for a run folder or
a sweep folder (a folder of run folders), written into that folder under ``report/``.

The HTML opens with no server and no network: plots are inline SVG, styles are inline, and the
best kernel's source and its diff against the starting kernel are in the page. ``report/`` also
keeps each plot as an ``.svg`` file, which ``report.md`` links to.
"""

from __future__ import annotations

import difflib
import html
import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..views.speedups import baseline_label
from . import plots
from .data import VERDICTS, ReportError, RunData, is_run_folder, load_run, run_folders

REPORT_FOLDER = "report"
DESCRIPTION_TAG = "mlflow.note.content"  # what MLflow's UI shows as a run's description
_NUMBER = re.compile(r"[-+]?[\d.]+(x)?( ±[\d.]+)?( ≈)?|-")
STYLE = """body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:90%}th,td{border:1px solid #ccc;
padding:3px 8px;text-align:left}td.n{text-align:right}
pre{background:#f6f8fa;padding:1em;overflow-x:auto;font-size:85%}figure{margin:1.5em 0}
figure svg{width:100%;height:auto}
.add{color:#1b5e20;background:#e8f5e9}.del{color:#b71c1c;background:#ffebee}.muted{color:#777}"""


@dataclass(frozen=True)
class Report:
    """The files one report wrote: ``html``, ``markdown`` and the plots (name -> .svg path)."""

    html: Path
    markdown: Path
    plots: dict[str, Path]


def _x(value: float, ci: float | None = None) -> str:
    if value is None or not math.isfinite(value) or value <= 0:
        return "-"
    return f"{value:.3f}x" + (f" ±{ci:.3f}" if ci is not None and math.isfinite(ci) else "")


def _us(value: float) -> str:
    return f"{value:.2f}" if math.isfinite(value) and value > 0 else "-"


def _cell(text: str) -> str:
    numeric = _NUMBER.fullmatch(text) is not None  # figures align right, words left
    return f"<td{' class=n' if numeric else ''}>{html.escape(text)}</td>"


def _table(header: list[str], rows: list[list[str]]) -> tuple[str, str]:
    """The same table as HTML and as markdown."""
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in rows)
    md = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    md += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return f"<table><tr>{cells}</tr>{body}</table>", "\n".join(md)


def _diff(start: str, best: str) -> list[str]:
    return list(difflib.unified_diff(start.splitlines(), best.splitlines(), "starting kernel",
                                     "best kernel", lineterm=""))


def _diff_html(lines: list[str]) -> str:
    out = []
    for line in lines:
        cls = ("add" if line.startswith("+") and not line.startswith("+++") else
               "del" if line.startswith("-") and not line.startswith("---") else "")
        text = html.escape(line)
        out.append(f'<span class="{cls}">{text}</span>' if cls else text)
    return "<pre>" + "\n".join(out) + "</pre>"


class _Page:
    """Builds the HTML and the markdown side by side."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.html: list[str] = [f"<h1>{html.escape(title)}</h1>"]
        self.md: list[str] = [f"# {title}", ""]
        self.plots: dict[str, str] = {}

    def heading(self, text: str) -> None:
        self.html.append(f"<h2>{html.escape(text)}</h2>")
        self.md += [f"## {text}", ""]

    def text(self, text: str) -> None:
        self.html.append(f"<p>{html.escape(text)}</p>")
        self.md += [text, ""]

    def table(self, header: list[str], rows: list[list[str]]) -> None:
        as_html, as_md = _table(header, rows)
        self.html.append(as_html)
        self.md += [as_md, ""]

    def plot(self, name: str, svg: str, caption: str) -> None:
        self.plots[name] = svg
        self.html.append(f'<figure id="{name}">{svg}<figcaption class="muted">'
                         f"{html.escape(caption)}</figcaption></figure>")
        self.md += [f"![{caption}]({name}.svg)", ""]

    def code(self, source: str, language: str, as_html: str | None = None) -> None:
        self.html.append(as_html or f"<pre>{html.escape(source)}</pre>")
        self.md += [f"```{language}", source.rstrip("\n"), "```", ""]

    def write(self, folder: Path) -> Report:
        folder.mkdir(parents=True, exist_ok=True)
        paths = {}
        for name, svg in self.plots.items():
            paths[name] = folder / f"{name}.svg"
            paths[name].write_text(svg)
        document = ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>"
                    f"{html.escape(self.title)}</title><style>{STYLE}</style></head><body>"
                    + "\n".join(self.html) + "</body></html>\n")
        (folder / "report.html").write_text(document)
        (folder / "report.md").write_text("\n".join(self.md).rstrip() + "\n")
        return Report(folder / "report.html", folder / "report.md", paths)


def _range(values: list[Any]) -> tuple[float, float]:
    finite = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return (min(finite), max(finite)) if finite else (math.nan, math.nan)


def confirmation_lines(summary: dict[str, Any]) -> list[str]:
    """What the report says of the best kernels judged again after the search: each one's
    median and range over its repeats against the figure the search had measured, or why
    nothing was judged again."""
    confirmation = summary.get("confirmation")
    if not confirmation:
        return ["Not judged again after the search (no kernel beat the starting one, or "
                "confirmation was turned off): the figures are the search's own."]
    if confirmation.get("skipped"):
        return [f"Unconfirmed: not judged again after the search ({confirmation['skipped']}): "
                f"the figures are the search's own single measurement, which favours a lucky "
                f"one."]
    lines = _secret_seed_lines(confirmation)
    for kernel in confirmation.get("kernels", []):
        low, high = _range(kernel.get("speedup_vs_start", []))
        chosen = " (reported above)" if kernel["candidate_id"] == confirmation.get("chosen") \
            else ""
        if kernel.get("failure"):
            lines.append(f"{kernel['candidate_id']}: judged again, failed: {kernel['failure']}")
            continue
        lines.append(
            f"{kernel['candidate_id']}{chosen}: judged {len(kernel.get('speedup_vs_start', []))} "
            f"more times after the search, median {_x(kernel.get('median_speedup_vs_start'))} "
            f"vs start ({_x(low)} to {_x(high)}); the search had measured "
            f"{_x(kernel.get('found_speedup_vs_start', math.nan))}.")
    return lines


def _secret_seed_lines(confirmation: dict[str, Any]) -> list[str]:
    """What the confirmation's secret seeds were and whether its kernels were checked on them."""
    seeds = confirmation.get("secret_seeds") or []
    if not seeds:
        return []
    unchecked = [k["candidate_id"] for k in confirmation.get("kernels", [])
                 if k.get("on_secret_seeds") is False]
    line = (f"Correctness judged again on {len(seeds)} secret seeds, drawn when the "
            f"confirmation started and never seen by the search "
            f"({', '.join(str(s) for s in seeds)}): a kernel wrong on them is out.")
    if unchecked:
        line += (f" Not checked on them (their evaluator draws no inputs of its own): "
                 f"{', '.join(unchecked)}.")
    return [line]


def run_description(summary: dict[str, Any], task: str) -> str:
    """The MLflow parent run's description (markdown, shown on its overview page): the best
    kernel's figures as the closing table gives them, its confirmation, and the report."""
    best = summary.get("best")
    if not best:
        return f"**{task}**: no kernel was found correct. Stopped: {summary.get('stop_reason')}."
    baseline = {s.get("best_baseline") for s in best.get("shapes", [])} - {None}
    lines = [f"**{task}**: best kernel `{best['candidate_id']}` "
             f"({best.get('language', '?')}), {_x(best.get('speedup_vs_start', math.nan))} "
             f"vs the starting kernel and "
             f"{_x(best.get('speedup_vs_best', math.nan), best.get('speedup_vs_best_ci'))} "
             f"vs the best baseline of each shape ({', '.join(sorted(baseline)) or 'none'}), "
             f"timed with a {summary.get('timing', {}).get('regime', '?')}.", ""]
    lines += [f"- {line}" for line in confirmation_lines(summary)]
    lines += ["", f"Stopped: {summary.get('stop_reason', '?')}. The whole report, with plots: "
              f"artifacts, `{REPORT_FOLDER}/report.html`."]
    return "\n".join(lines)


def _run_page(run: RunData) -> _Page:
    summary, best = run.summary, run.summary.get("best") or {}
    page = _Page(f"kernelswarm report: {run.name}")
    search = run.config.get("search", {})
    reasons = {x.get("stop_reason") for x in summary.get("lineages", [])} - {None, ""}
    stopped = (f"stopped: {summary.get('stop_reason', '?')}" if len(reasons) < 2
               else "each lineage stopped for its own reason (below)")
    page.text(f"Task {run.task} ({run.language}) on {summary.get('baselines', {}).get('device', '?')}"
              f" · {search.get('lineages', '?')} lineages · {len(run.records)} evaluations in "
              f"{summary.get('wall_s', math.nan):.0f} s · {stopped}"
              f" · timed with a {summary.get('timing', {}).get('regime', '?')}.")
    page.heading("Best kernel")
    page.table(*_best_table(run))
    if best.get("file"):
        page.text(f"File: {best['file']}")
    for line in confirmation_lines(summary):
        page.text(line)
    page.heading("Lineages")
    page.text("Each lineage's best as the search measured it (one evaluation each).")
    page.table(["lineage", "steps", "best vs start", "best kernel", "stopped"], [
        [str(x["lineage"]), str(x["steps"]), _x(x.get("best_speedup", math.nan)),
         x.get("best_candidate") or "-", (x.get("stop_reason") or "").splitlines()[0]
         if x.get("stop_reason") else ""] for x in summary.get("lineages", [])])
    migrants = any(r.role == "migrant" for r in run.records)
    page.plot("best_over_time", plots.best_over_time(run),
              "Each lineage's best speedup over the starting kernel"
              + ("; triangles: a migrant from another lineage arrived." if migrants else "."))
    page.heading("Baselines")
    rows = []
    for name in run.baseline_names:
        if name in run.skipped:
            rows.append([name, "skipped: " + run.skipped[name]])
        elif name in run.anchors or name in ("eager", "compile"):
            rows.append([name, "measured"])
    page.table(["baseline", "status"], rows)
    header = ["shape", "best kernel µs", "start µs", "eager µs", "compile µs",
              *[f"{n} µs" for n in sorted(run.anchors)], "baselines carried ×",
              "best baseline", "× best", "roofline"]
    page.table(header, [[s.shape, _us(s.time_us), _us(s.start_us), _us(s.eager_us),
                         _us(s.compile_us), *[_us(run.anchors[n].get(s.shape, math.nan))
                                              for n in sorted(run.anchors)],
                         f"{s.baseline_scale:.2f}" if run.measured is not None else "-",
                         s.best_baseline or "-", _x(s.speedup_vs_best),
                         f"{s.roofline_fraction:.2f}" if math.isfinite(s.roofline_fraction)
                         else "-"] for s in run.best_shapes])
    page.text(_carried_text(run))
    page.plot("shape_times", plots.shape_times(run),
              "Per shape: the best kernel, the starting kernel and every measured baseline.")
    caption = ("Roofline fraction per shape: ideal time (bytes over the copy bandwidth beyond "
               "the last-level cache, or flops over peak) over measured time.")
    if summary.get("timing", {}).get("flush_cache") is False:
        caption += (" Timed with a warm cache: a shape whose data fits in the last-level cache "
                    "is served from it and may exceed 1; no roofline bounds it there.")
    page.plot("roofline", plots.roofline(run), caption)
    page.heading("Verdicts")
    counts = {v: sum(r.status == v for r in run.records) for v in VERDICTS}
    page.table(list(counts), [[str(c) for c in counts.values()]])
    screening = summary.get("screening") or {}
    if screening.get("screened_out"):
        page.text(f"{screening['screened_out']} candidates were screened out (correct, but "
                  f"slower than their lineage's best on each screening shape, so not timed on "
                  f"the others): about {screening.get('saved_s', 0.0):.1f} s of timing saved.")
    page.plot("verdicts", plots.verdicts_over_time(run), "Verdicts over the run's wall time.")
    page.heading(f"Best kernel source ({run.best_id or 'none'})")
    page.code(run.best_source, run.language)
    page.heading(f"Diff against the starting kernel ({run.start_id or 'none'})")
    diff = _diff(run.start_source, run.best_source)
    page.code("\n".join(diff) or "(identical)", "diff", _diff_html(diff) if diff else None)
    return page


def _carried_text(run: RunData) -> str:
    """What the baseline columns are: measured once, then carried over (views/
    carried_baselines.py), with eager's times as measured."""
    text = ("Baseline times are measured once per task, machine and timing settings, with the "
            "starting kernel beside them, and cached; each evaluation carries them over by its "
            "starting kernel's time now over then (\"baselines carried ×\"), so that a machine "
            "busier or quieter than at the measurement moves the kernel's times and the "
            "baselines' alike.")
    if run.measured is None:
        return text + " The cache entry they were measured in is gone."
    eager = [run.measured.times_us.get(s.shape, {}).get("eager") for s in run.best_shapes]
    if all(e is not None for e in eager):
        text += f" Eager as measured: {', '.join(f'{e:.2f}' for e in eager)} µs."
    return text + f" Measured: {run.measured.path}."


def _best_table(run: RunData) -> tuple[list[str], list[list[str]]]:
    """The best kernel's header and row: over the start, the best baseline (left out where it
    is eager alone: the "vs eager" column says it), eager and compile (left out where not
    measured), and whether its figures were confirmed."""
    best = run.summary.get("best") or {}
    names = {s.best_baseline for s in run.best_shapes if s.best_baseline}
    columns = {"kernel": run.best_id or "none",
               "vs start": _x(best.get("speedup_vs_start", math.nan),
                              best.get("speedup_vs_start_ci")),
               baseline_label(names): _x(best.get("speedup_vs_best", math.nan),
                                         best.get("speedup_vs_best_ci")),
               "vs eager": _x(best.get("speedup_vs_eager", math.nan)),
               "vs compile": _x(best.get("speedup_vs_compile", math.nan))}
    if columns["vs compile"] == "-":
        del columns["vs compile"]
    if best.get("confirmed"):
        columns["figures"] = f"confirmed (median of {best.get('repeats', '?')} repeats)"
    elif best:
        columns["figures"] = "unconfirmed (the search's own)"
    return list(columns), [list(columns.values())]


def _sweep_page(folder: Path, runs: list[RunData]) -> _Page:
    page = _Page(f"kernelswarm sweep report: {folder.name}")
    page.text(f"{len(runs)} run folders in {folder}.")
    header = ["cell", "task", "language", "lineages", "records", "correct", "best vs start",
              "vs best baseline", "wall s"]
    rows, vs_start, vs_best = [], [], []
    for run in runs:
        best = run.summary.get("best") or {}
        ok = sum(r.status == "OK" for r in run.records)
        rows.append([run.name, run.task, run.language,
                     str(run.config.get("search", {}).get("lineages", "?")),
                     str(len(run.records)), f"{ok}/{len(run.records)}",
                     _x(best.get("speedup_vs_start", math.nan)),
                     _x(best.get("speedup_vs_best", math.nan)),
                     f"{run.summary.get('wall_s', math.nan):.0f}"])
        vs_start.append(float(best.get("speedup_vs_start") or math.nan))
        vs_best.append(float(best.get("speedup_vs_best") or math.nan))
    page.heading("Cells")
    page.table(header, rows)
    page.plot("sweep", plots.sweep_plot([r.name for r in runs],
                                        {"vs start": vs_start, "vs best baseline": vs_best}),
              "Best kernel per cell, over the starting kernel and over the best baseline.")
    return page


def write_report(folder: str | Path) -> Report:
    """Write the report of a run folder or of a sweep folder into ``<folder>/report/``."""
    root = Path(folder).resolve()
    if not root.is_dir():
        raise ReportError(f"{root} is not a folder")
    if is_run_folder(root):
        return _run_page(load_run(root)).write(root / REPORT_FOLDER)
    cells = run_folders(root)
    if not cells:
        raise ReportError(f"{root} is neither a kernelswarm run folder nor a folder of run "
                          f"folders (none of its subfolders has evaluations/ and config.json)")
    return _sweep_page(root, [load_run(c) for c in cells]).write(root / REPORT_FOLDER)


def log_report(report: Report, run_dir: Path,
               find_run: Callable[[str, str, str, str], tuple[str, str] | None] | None = None
               ) -> str:
    """Log the report's files to the run's MLflow parent run (under ``report/``); returns the
    parent run's id, or "" when the run logged nothing to MLflow."""
    from ..sinks.mlflow_runs import find_parent_run
    from ..sinks.mlflow_store import absolute_uri, mlflow_client
    from ..sinks.mlflow_summary import log_summary_figures

    config = json.loads((run_dir / "config.json").read_text())
    tracking = config.get("tracking", {})
    if not tracking.get("mlflow"):
        return ""
    uri = absolute_uri(tracking["mlflow_uri"])
    experiment = tracking.get("experiment") or config["run"]["name"]
    found = (find_run or find_parent_run)(uri, experiment, run_dir.name, str(run_dir))
    if found is None:
        return ""
    run_id, _ = found
    client = mlflow_client(uri)
    client.log_artifacts(run_id, str(report.html.parent), REPORT_FOLDER)  # the folder's files
    summary = run_dir / "summary.json"
    if summary.is_file():
        document = json.loads(summary.read_text())
        log_summary_figures(client, run_id, document)  # wall_s as summary.json has it
        log_language_bests(client, run_id, document)
        task = config.get("task", {}).get("name") or run_dir.name
        client.set_tag(run_id, DESCRIPTION_TAG, run_description(document, Path(task).name))
    return run_id


def log_language_bests(client: Any, run_id: str, summary: dict[str, Any]) -> list[str]:
    """In a run of several languages, each language's best as metrics of the parent run
    (``best_speedup.<language>`` over its own starting kernel, ``best_speedup_vs_reference.
    <language>`` over the reference language's); returns the metric names logged."""
    from mlflow.entities import Metric

    languages = summary.get("languages") or {}
    if len(languages) < 2:
        return []
    millis = int(time.time() * 1000)
    metrics = []
    for language, entry in sorted(languages.items()):
        best = entry.get("best")
        if best is None:
            continue
        metrics += [Metric(f"best_speedup.{language}", best["speedup_vs_start"], millis, 0),
                    Metric(f"best_speedup_vs_reference.{language}",
                           best["speedup_vs_reference"], millis, 0)]
    if metrics:
        client.log_batch(run_id, metrics=metrics)
    return [m.key for m in metrics]
