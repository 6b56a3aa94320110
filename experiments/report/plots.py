"""The report's plots, drawn with matplotlib and returned as SVG text (inline in the HTML, kept as
``.svg`` files beside it, logged to MLflow): vector graphics stay sharp at any zoom and weigh a
few kB each. Text stays text in the SVG (``svg.fonttype = none``), so a browser's search finds
shape labels and baseline names in the plots too.
"""

from __future__ import annotations

import io
import math
from collections import Counter

import matplotlib

matplotlib.use("Agg")  # no display, no GUI toolkit: the report is written by a command line

import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
from matplotlib import ticker  # noqa: E402

from ..views.speedups import compact_labels  # noqa: E402
from .data import VERDICTS, RunData  # noqa: E402

plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "axes.spines.top": False,
                     "axes.spines.right": False})

# One colour per verdict, stable across plots and runs (colour-blind safe pairs).
VERDICT_COLOURS = {"OK": "#2e7d32", "SCREENED_OUT": "#9ccc65", "INCORRECT": "#c62828",
                   "COMPILE_ERROR": "#ef6c00", "RUNTIME_ERROR": "#6a1b9a", "TIMEOUT": "#5d4037",
                   "REJECTED": "#37474f"}
BASELINE_COLOURS = {"eager": "#90a4ae", "compile": "#546e7a", "start": "#ffb74d",
                    "best kernel": "#1565c0"}


def _svg(figure: plt.Figure) -> str:
    buffer = io.StringIO()
    # No date in the metadata: the same run gives the same file.
    figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog: the SVG goes inline in HTML


def _empty(title: str, why: str) -> str:
    figure, axes = plt.subplots(figsize=(7, 1.2))
    axes.set_axis_off()
    axes.set_title(title, loc="left")
    axes.text(0.0, 0.4, why, transform=axes.transAxes)
    return _svg(figure)


def best_over_time(run: RunData) -> str:
    """Each lineage's best speedup over the starting kernel against the evaluation time spent so
    far (all lineages, the device's busy seconds); migrants marked where they arrived."""
    title = "Best speedup over the starting kernel, per lineage"
    records = [r for r in run.records if r.lineage >= 0]
    if not records:
        return _empty(title, "no lineage recorded an evaluation")
    figure, axes = plt.subplots(figsize=(7, 3.2))
    spent, clock = {}, 0.0
    for r in run.records:
        clock += (r.eval_s if math.isfinite(r.eval_s) else 0.0)
        spent[r.seq] = clock
    migrated = False
    for lineage in sorted({r.lineage for r in records}):
        mine = [r for r in records if r.lineage == lineage]
        xs = [spent[r.seq] for r in mine]
        ys = [r.lineage_best if math.isfinite(r.lineage_best) else 0.0 for r in mine]
        (line,) = axes.step(xs, ys, where="post", label=f"lineage {lineage}")
        moved = [(spent[r.seq], y) for r, y in zip(mine, ys, strict=True) if r.role == "migrant"]
        if moved:
            migrated = True
            axes.scatter(*zip(*moved, strict=True), marker="v", s=40, color=line.get_color(),
                         edgecolor="black", zorder=3)
    if migrated:
        axes.scatter([], [], marker="v", color="white", edgecolor="black", label="migrant arrived")
    axes.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
    axes.set_xlabel("evaluation time spent, all lineages (s)")
    axes.set_ylabel("best speedup vs start (x)")
    axes.set_title(title, loc="left")
    axes.legend(fontsize=8, frameon=False)
    return _svg(figure)


def shape_times(run: RunData) -> str:
    """Per shape, the best kernel's time against every baseline that has a time there: one row
    per shape, one marker per kernel on a log axis. Markers, not bars: a bar on a log axis
    starts nowhere in particular, and its length says nothing."""
    title = "Time per shape: the best kernel against every baseline (lower is better)"
    shapes = run.best_shapes
    if not shapes:
        return _empty(title, "no kernel was timed")
    series: dict[str, list[float]] = {
        "eager": [s.eager_us for s in shapes], "compile": [s.compile_us for s in shapes]}
    for name, times in sorted(run.anchors.items()):
        series[name] = [times.get(s.shape, math.nan) for s in shapes]
    series["start"] = [s.start_us for s in shapes]
    series["best kernel"] = [s.time_us for s in shapes]
    series = {n: v for n, v in series.items() if any(_timed(x) for x in v)}
    labels, common = compact_labels([s.shape for s in shapes])
    figure, axes = plt.subplots(figsize=(7, 0.9 + 0.4 * len(shapes)))
    for k in range(len(shapes)):  # a faint line from the fastest to the slowest
        row = [v[k] for v in series.values() if _timed(v[k])]
        if row:
            axes.plot([min(row), max(row)], [k, k], color="#dddddd", linewidth=1, zorder=1)
    spread = 0.5 / max(1, len(series))  # markers of one row apart, never on the next row
    for i, (name, values) in enumerate(series.items()):
        points = [(v, k + (i - (len(series) - 1) / 2) * spread)
                  for k, v in enumerate(values) if _timed(v)]
        axes.scatter(*zip(*points, strict=True), label=name, s=28, zorder=2,
                     marker=SERIES_MARKERS[i % len(SERIES_MARKERS)],
                     color=BASELINE_COLOURS.get(name))
    axes.set_yticks(list(range(len(shapes))), [labels[s.shape] for s in shapes], fontsize=8)
    axes.set_ylim(len(shapes) - 0.5, -0.5)  # the first shape on top
    _log_time_axis(axes, [x for v in series.values() for x in v if _timed(x)])
    axes.set_xlabel("median time per call (µs, log scale)")
    axes.set_title(title + (f"\n{common}" if common else ""), loc="left")
    # beside the markers, not over them
    axes.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _svg(figure)


SERIES_MARKERS = ("o", "s", "D", "^", "v", "P", "X")
_NICE = (1.0, 2.0, 5.0)  # tick values per decade on a short axis


def _timed(value: float) -> bool:
    return math.isfinite(value) and value > 0


def _log_time_axis(axes: plt.Axes, times: list[float]) -> None:
    """A log x axis whose limits are round values (1, 2 or 5 times a power of ten) around
    ``times``, labelled at those values only, in plain numbers: matplotlib's own labels put
    one on every minor tick of a short axis, where they overlap."""
    low, high = min(times) / 1.15, max(times) * 1.15
    decades = math.log10(high / low)
    # round values close enough to frame a short axis, few enough not to crowd a long one
    nice = (1.0, 1.5, 2.0, 3.0, 5.0, 7.0) if decades <= 1 else _NICE if decades <= 3 else (1.0,)
    below = [m * 10 ** e for e in range(math.floor(math.log10(low)) - 1,
                                        math.floor(math.log10(low)) + 1) for m in nice]
    above = [m * 10 ** e for e in range(math.floor(math.log10(high)),
                                        math.floor(math.log10(high)) + 2) for m in nice]
    low = max(v for v in below if v <= low)
    high = min(v for v in above if v >= high)
    axes.set_xscale("log")
    axes.set_xlim(low, high)
    axes.xaxis.set_major_locator(ticker.LogLocator(base=10, subs=nice))
    axes.xaxis.set_major_formatter(ticker.FuncFormatter(lambda x, _: f"{x:g}"))
    axes.xaxis.set_minor_formatter(ticker.NullFormatter())


def roofline(run: RunData) -> str:
    """Each shape's roofline fraction (ideal time / measured time) for the best kernel and the
    starting kernel: how far from the machine's limit each one runs."""
    title = "Roofline fraction per shape (1.0 = at the machine's limit)"
    shapes = [s for s in run.best_shapes if math.isfinite(s.roofline_fraction)]
    if not shapes:
        return _empty(title, "no roofline figure was recorded")
    figure, axes = plt.subplots(figsize=(7, 0.6 + 0.35 * len(shapes)))
    ys = range(len(shapes))
    start = [s.roofline_fraction * s.time_us / s.start_us
             if s.start_us > 0 and math.isfinite(s.start_us) else 0.0 for s in shapes]
    axes.barh([y + 0.2 for y in ys], start, height=0.4, label="start",
              color=BASELINE_COLOURS["start"])
    axes.barh([y - 0.2 for y in ys], [s.roofline_fraction for s in shapes], height=0.4,
              label="best kernel", color=BASELINE_COLOURS["best kernel"])
    axes.set_yticks(list(ys), [s.shape for s in shapes], fontsize=7)
    axes.invert_yaxis()
    axes.axvline(1.0, color="grey", linewidth=0.8, linestyle=":")
    axes.set_xlabel("ideal time / measured time")
    axes.set_title(title, loc="left")
    axes.legend(fontsize=8, frameon=False)
    return _svg(figure)


def verdicts_over_time(run: RunData, bins: int = 12) -> str:
    """How many evaluations got each verdict, in equal slices of the run's wall time."""
    title = "Verdicts over time"
    records = [r for r in run.records if math.isfinite(r.wall_s)]
    if not records:
        return _empty(title, "no evaluation was recorded")
    end = max(r.wall_s for r in records) or 1.0
    width = end / bins
    counts = [Counter() for _ in range(bins)]
    for r in records:
        counts[min(bins - 1, int(r.wall_s / width))][r.status] += 1
    statuses = [v for v in VERDICTS if any(c[v] for c in counts)]
    statuses += sorted({s for c in counts for s in c} - set(statuses))
    figure, axes = plt.subplots(figsize=(7, 2.8))
    xs = [width * (k + 0.5) for k in range(bins)]
    bottom = [0] * bins
    for status in statuses:
        values = [c[status] for c in counts]
        axes.bar(xs, values, width=width * 0.9, bottom=bottom, label=status,
                 color=VERDICT_COLOURS.get(status))
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    axes.set_xlabel("seconds since the run started")
    axes.set_ylabel("evaluations")
    axes.set_title(title, loc="left")
    axes.legend(fontsize=8, frameon=False, ncol=3)
    return _svg(figure)


def sweep_plot(cells: list[str], metrics: dict[str, list[float]]) -> str:
    """A sweep: one group of bars per cell (run folder), one bar per metric."""
    title = "Sweep: best kernel per cell"
    if not cells:
        return _empty(title, "no run folder in this sweep")
    figure, axes = plt.subplots(figsize=(7, 0.8 + 0.5 * len(cells) * max(1, len(metrics)) / 2))
    height = 0.8 / max(1, len(metrics))
    for i, (name, values) in enumerate(metrics.items()):
        axes.barh([k + i * height for k in range(len(cells))],
                  [v if math.isfinite(v) else 0.0 for v in values], height=height, label=name)
    axes.set_yticks([k + 0.4 - height / 2 for k in range(len(cells))], cells, fontsize=7)
    axes.invert_yaxis()
    axes.axvline(1.0, color="grey", linewidth=0.8, linestyle=":")
    axes.set_xlabel("speedup (x)")
    axes.set_title(title, loc="left")
    axes.legend(fontsize=8, frameon=False)
    return _svg(figure)
