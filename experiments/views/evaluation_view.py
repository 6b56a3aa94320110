"""A judged kernel file as ``kernelswarm eval`` shows it: a table per shape, the verdict, and the
same as JSON."""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich import box
from rich.markup import escape
from rich.table import Table

from kernelswarm.search import Evaluation, Status

from .speedups import baseline_names, compact_labels, finite, measured, speedup_text
from .table_fit import fit


def evaluation_document(evaluation: Evaluation, task: str, language: str,
                        candidate: Path) -> dict[str, Any]:
    """The evaluation as a JSON-able dict (NaN as null)."""
    doc = asdict(evaluation)
    doc["status"] = evaluation.status.value
    # a baseline not measured is null, never 0.0 (views/speedups.py: measured)
    doc.update(task=task, language=language, file=str(candidate),
               speedup_vs_start=evaluation.speedup,
               speedup_vs_eager=measured(evaluation.speedup_vs_eager),
               speedup_vs_best=measured(evaluation.speedup_vs_best),
               speedup_vs_best_ci=evaluation.geomean_ci("speedup_vs_best"),
               speedup_vs_compile=measured(evaluation.speedup_vs_compile))
    return finite(doc)


def _number(value: float, fmt: str, suffix: str = "") -> str:
    return f"{value:{fmt}}{suffix}" if math.isfinite(value) else "—"


EVAL_COLUMNS = ("shape", "ok", "max err", "µs", "IQR µs", "× start", "best baseline", "× best",
                "× eager", "roofline")


def evaluation_table(evaluation: Evaluation, task: str, language: str,
                     regime: str = "", bounds: dict[str, str] | None = None,
                     width: int | None = None) -> Table:
    """One row per shape: correctness, largest error, median time and its interquartile range
    (µs), speedups vs the starting kernel, the best baseline (named; ``≈`` inside the noise) and
    PyTorch eager, percent of the roofline (``bounds``: "in cache" where no roofline bounds
    the shape); ``regime`` (the cache regime) in the title. ``width``: columns are left out
    (the spread, the error, eager, the roofline) until the table fits it."""
    bounds = bounds or {}
    labels, common = compact_labels([s.shape for s in evaluation.shapes])
    title = " · ".join(p for p in (task, language, evaluation.device, common, regime) if p)
    rows = [dict(zip(EVAL_COLUMNS, (
        escape(labels[s.shape].replace(",", ", ")), "yes" if s.correct else "[red]no[/]",
        _number(s.max_abs_err, ".1e"), _number(s.time_us, ".1f"),
        _number(s.time_spread_us, ".1f"), _number(s.speedup_vs_start, ".2f", "x"),
        s.best_baseline or "—",
        speedup_text(s.speedup_vs_best, s.speedup_vs_best_ci, mark_noise=True),
        _number(s.speedup_vs_eager, ".2f", "x"),
        "in cache" if bounds.get(s.shape) == "cache"
        else _number(s.roofline_fraction * 100, ".1f", "%")), strict=True))
        for s in evaluation.shapes]

    def build(columns: tuple[str, ...]) -> Table:
        table = Table(title=escape(title), box=box.SIMPLE_HEAD, padding=(0, 0, 0, 1),
                      show_edge=False)
        for column in columns:
            table.add_column(column, justify="left" if column == "shape" else "right",
                             no_wrap=True)
        for row in rows:
            table.add_row(*(row[c] for c in columns))
        if "cache" in bounds.values() and "roofline" in columns:
            table.caption = ("in cache: with a warm cache the shape's data fits in the "
                             "last-level cache, faster than the memory roofline allows, so "
                             "none applies")
        return table

    return fit(build, EVAL_COLUMNS, ("IQR µs", "max err", "× eager", "roofline", "ok"), width)


def verdict_text(evaluation: Evaluation) -> str:
    colour = "green" if evaluation.ok else "red"
    text = f"[bold {colour}]{evaluation.status.value}[/] {escape(evaluation.message)}"
    if evaluation.status is Status.OK:
        best = speedup_text(evaluation.speedup_vs_best, evaluation.geomean_ci("speedup_vs_best"),
                            mark_noise=True)
        text += (f"\nspeedup (geometric mean): {evaluation.speedup:.3f}x vs the starting kernel, "
                 f"{best} vs ")
        if baseline_names(evaluation) == {"eager"}:
            text += "PyTorch eager (the only baseline measured)"
        else:
            text += (f"the best baseline of each shape, {evaluation.speedup_vs_eager:.3f}x vs "
                     f"PyTorch eager")
    return text

