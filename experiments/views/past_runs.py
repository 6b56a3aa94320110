"""Past runs read back from their folders, for ``kernelswarm runs``: one line per run folder
(a run, a tune, a sweep's cell), and two runs side by side, shape by shape.

Everything comes from what each folder recorded (``config.json`` and ``summary.json``, which
``run``, ``tune`` and a sweep's cells write when they end): nothing is measured again. A folder
with no ``summary.json`` is listed as unfinished (still running, or stopped without one).
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .speedups import compact_labels
from .table_fit import fit

# <run name>-<YYYYmmdd>-<HHMMSS>-<4 hex digits>: how run, tune and sweep name their folders
_STAMP = re.compile(r"-(\d{8})-(\d{6})-[0-9a-f]{4}$")
INTERRUPTED = "interrupted by the user"
_START_FAILED = re.compile(r"the starting kernel fails evaluation \((\w+)\)")


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) else math.nan


def _read(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


@dataclass(frozen=True)
class PastRun:
    """One run folder as its files state it."""

    folder: Path
    name: str  # the folder's name; "<sweep>/<cell>" for a sweep's cell
    started: float  # Unix time: from the folder's name, else its config.json's
    kind: str  # run | tune
    config: Mapping[str, Any]
    summary: Mapping[str, Any]  # empty: the run wrote none (yet)

    @property
    def task(self) -> str:
        return Path(str(self.config.get("task", {}).get("name", "?"))).name

    @property
    def language(self) -> str:
        languages = self.config.get("search", {}).get("languages") or []
        return "+".join(languages) or str(self.config.get("task", {}).get("language", "?"))

    @property
    def device(self) -> str:
        """The device the run timed on, as its evaluations named it (e.g. "cpu: Intel(R) Xeon(R)
        Processor"), else its configuration's ``evaluator.device``."""
        named = (self.summary.get("baselines") or {}).get("device") or self.summary.get("device")
        return str(named or self.config.get("evaluator", {}).get("device", "?"))

    @property
    def best(self) -> Mapping[str, Any]:
        return self.summary.get("best") or {}

    @property
    def status(self) -> str:
        """finished | no correct kernel | interrupted | start failed (<its verdict>) | failed |
        unfinished (no summary.json)."""
        summary = self.summary
        if not summary:
            return "unfinished"
        if isinstance(summary.get("status"), str):  # a summary that says it outright
            return summary["status"]
        if summary.get("failure") or summary.get("error"):
            return "failed"
        if summary.get("stop_reason") == INTERRUPTED:
            return "interrupted"
        failed = _START_FAILED.match(str(summary.get("stop_reason", "")))
        if failed and not self.best:  # nothing to search from: StartingKernelFailed's words
            return f"start failed ({failed.group(1)})"
        return "finished" if self.best else "no correct kernel"

    @property
    def regime(self) -> str:
        timing = self.summary.get("timing") or {}
        if timing.get("regime"):
            return str(timing["regime"])
        flushed = timing.get("flush_cache")
        return "?" if flushed is None else ("cold cache (flushed)" if flushed
                                            else "warm cache (not flushed)")

    @property
    def baselines(self) -> str:
        """The best baselines the best kernel was compared with, e.g. "eager"."""
        names = {s.get("best_baseline") for s in self.best.get("shapes", [])} - {None, ""}
        return "/".join(sorted(names))

    def speedup(self, figure: str = "speedup_vs_start") -> str:
        """The best kernel's figure, ``≈`` where its 95% interval holds 1.0, ``(unconfirmed)``
        where a kernel better than the start was not judged again after the search."""
        value, ci = _number(self.best.get(figure)), _number(self.best.get(f"{figure}_ci"))
        if not value > 0:
            return "-"
        text = f"{value:.3f}x" + (" ≈" if math.isfinite(ci) and abs(value - 1.0) <= ci else "")
        starts = {entry.get("start_candidate")
                  for entry in (self.summary.get("languages") or {}).values()}
        if (self.best.get("confirmed") is False and self.kind == "run"
                and self.best.get("candidate_id") not in starts):  # a start is timed vs itself
            text += " (unconfirmed)"
        return text


@dataclass(frozen=True)
class RunList:
    """The run folders found under a folder, oldest first, and what was left out."""

    root: Path
    runs: tuple[PastRun, ...]
    skipped: tuple[str, ...] = field(default_factory=tuple)


def _started(folder: Path) -> float:
    stamp = _STAMP.search(folder.name)
    if stamp:
        try:
            return time.mktime(time.strptime(stamp.group(1) + stamp.group(2), "%Y%m%d%H%M%S"))
        except ValueError:
            pass
    return (folder / "config.json").stat().st_mtime


def read_run(folder: Path, name: str | None = None) -> PastRun:
    """The run folder ``folder`` (it has a ``config.json``)."""
    return PastRun(folder, name or folder.name, _started(folder),
                   "tune" if (folder / "tune.json").is_file() else "run",
                   _read(folder / "config.json"), _read(folder / "summary.json"))


def is_run_folder(folder: Path) -> bool:
    return folder.is_dir() and (folder / "config.json").is_file()


def find_runs(root: Path) -> RunList:
    """Every run folder in ``root`` (or ``root`` itself), a sweep folder's cells included."""
    if is_run_folder(root):
        return RunList(root, (read_run(root),))
    runs, skipped = [], []
    for child in sorted(p for p in root.iterdir() if p.is_dir()):
        if is_run_folder(child):
            runs.append(read_run(child))
        elif (child / "sweep.json").is_file():
            runs += [read_run(cell, f"{child.name}/{cell.name}")
                     for cell in sorted(child.iterdir()) if is_run_folder(cell)]
        else:
            skipped.append(child.name)
    return RunList(root, tuple(sorted(runs, key=lambda r: (r.started, r.name))), tuple(skipped))


LIST_COLUMNS = ("run", "date", "kind", "task", "language", "device", "status", "vs start",
                "vs best baseline", "wall s")


def list_table(found: RunList, width: int | None = None) -> Table:
    """One line per run folder, oldest first: when, what, where, how it ended, its best kernel
    over its starting kernel and over the best baseline, its wall time."""
    rows = []
    for run in found.runs:
        baseline = run.speedup("speedup_vs_best")
        if baseline != "-" and run.baselines:
            baseline += f" ({run.baselines})"
        wall = _number(run.summary.get("wall_s"))
        rows.append(dict(zip(LIST_COLUMNS, (
            run.name, time.strftime("%Y-%m-%d %H:%M", time.localtime(run.started)), run.kind,
            run.task, run.language, run.device, run.status, run.speedup(), baseline,
            f"{wall:.0f}" if math.isfinite(wall) else "-"), strict=True)))

    def build(columns: tuple[str, ...]) -> Table:
        # no vertical rules: a terminal's width goes to the figures
        table = Table(title=escape(f"kernelswarm runs in {found.root}"), box=box.SIMPLE_HEAD,
                      pad_edge=False)
        for column in columns:
            # a long name folds onto a second line; figures and words are never cut
            table.add_column(column, no_wrap=column != "run", overflow="fold",
                             justify="right" if column in ("vs start", "vs best baseline",
                                                           "wall s") else "left")
        for row in rows:
            table.add_row(*(escape(row[c]) for c in columns),
                          style=None if row["status"] == "finished" else "yellow")
        return table

    return fit(build, LIST_COLUMNS, ("kind", "language", "device", "wall s", "date",
                                     "vs best baseline"), width)


def _shape_times(run: PastRun) -> dict[str, Mapping[str, Any]]:
    return {str(s.get("shape")): s for s in run.best.get("shapes", [])}


def _us(shape: Mapping[str, Any] | None) -> str:
    if not shape or not _number(shape.get("time_us")) > 0:
        return "-"
    spread = _number(shape.get("time_spread_us"))
    return f"{shape['time_us']:.2f}" + (f" ±{spread:.2f}" if math.isfinite(spread) else "")


def _x(shape: Mapping[str, Any] | None, figure: str) -> str:
    value = _number((shape or {}).get(figure))
    return f"{value:.3f}x" if value > 0 else "-"


def _same_device(a: str, b: str) -> bool:
    """Whether two devices are one kind of device: by name where both runs recorded one
    ("cpu: <model>"), else by kind (a summary written before names were kept says "cpu")."""
    if ":" in a and ":" in b:
        return a == b
    return a.split(":")[0] == b.split(":")[0]


def compare_view(a: PastRun, b: PastRun, width: int | None = None) -> Group:
    """Two runs side by side: what each ran and how it ended, then per shape each best
    kernel's time, speedups and ``B vs A`` (A's time over B's: above 1, B's kernel is the
    faster), with a warning where the two were not timed alike."""
    overview = Table(title="kernelswarm runs compare", show_header=True)
    overview.add_column("")
    for label, run in (("A", a), ("B", b)):
        overview.add_column(escape(f"{label}: {run.name}"), overflow="fold")
    for label, get in (
            ("task", lambda r: r.task), ("language", lambda r: r.language),
            ("device", lambda r: r.device), ("timing", lambda r: r.regime),
            ("status", lambda r: r.status),
            ("stopped", lambda r: str(r.summary.get("stop_reason", "-")).splitlines()[0]),
            ("best kernel", lambda r: str(r.best.get("candidate_id") or "-")),
            ("vs start", lambda r: r.speedup()),
            ("vs best baseline", lambda r: r.speedup("speedup_vs_best")
             + (f" ({r.baselines})" if r.baselines else "")),
            ("wall s", lambda r: f"{_number(r.summary.get('wall_s')):.0f}")):
        overview.add_row(label, escape(get(a)), escape(get(b)))
    times_a, times_b = _shape_times(a), _shape_times(b)
    shapes = list(dict.fromkeys([*times_a, *times_b]))
    labels, common = compact_labels(shapes) if shapes else ({}, "")
    columns = ("shape", "A µs", "B µs", "B vs A", "A × start", "B × start", "A × best",
               "B × best")
    rows = []
    for shape in shapes:
        sa, sb = times_a.get(shape), times_b.get(shape)
        ta, tb = _number((sa or {}).get("time_us")), _number((sb or {}).get("time_us"))
        ratio = f"{ta / tb:.3f}x" if ta > 0 and tb > 0 else "-"
        rows.append(dict(zip(columns, (labels[shape], _us(sa), _us(sb), ratio,
                                       _x(sa, "speedup_vs_start"), _x(sb, "speedup_vs_start"),
                                       _x(sa, "speedup_vs_best"), _x(sb, "speedup_vs_best")),
                             strict=True)))

    pairs = {"× best": ("A × best", "B × best"), "× start": ("A × start", "B × start")}

    def build(groups: tuple[str, ...]) -> Table:  # A's and B's figures go, or stay, together
        shown = [c for g in groups for c in pairs.get(g, (g,))]
        title = "best kernel per shape" + (f" ({common})" if common else "")
        table = Table(title=escape(title))
        for column in shown:
            table.add_column(column, no_wrap=column != "shape",
                             justify="left" if column == "shape" else "right")
        for row in rows:
            table.add_row(*(escape(row[c]) for c in shown))
        return table

    parts: list[Any] = [overview]
    if rows:
        parts.append(fit(build, ("shape", "A µs", "B µs", "B vs A", "× start", "× best"),
                         ("× best", "× start"), width))
    else:
        parts.append(Text("neither run has a best kernel with per-shape figures"))
    differs = [what for what, same in (("devices", _same_device(a.device, b.device)),
                                       ("timing regimes", a.regime == b.regime),
                                       ("tasks", a.task == b.task)) if not same]
    if differs:
        parts.append(Text(f"the two runs differ in {' and '.join(differs)}: their times are "
                          f"not those of one experiment", style="yellow"))
    return Group(*parts)
