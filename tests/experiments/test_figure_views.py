"""How a figure is drawn where a user reads it: the closing table's per-shape times and the
report's time plot."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest
from matplotlib.container import BarContainer
from rich.console import Console

from kernelswarm.experiments.report import plots
from kernelswarm.experiments.report.data import RunData, ShapeFigures
from kernelswarm.experiments.views.progress import shape_table
from kernelswarm.search import Evaluation, ShapeResult, Status


def test_a_time_whose_spread_is_unknown_reads_without_nan():
    # fewer than 4 timed calls (a sandbox stopped by Ctrl-C, say): a median with no spread
    shape = ShapeResult(shape="d=2048,tokens=64", correct=True, time_us=425.65,
                        time_spread_us=math.nan, samples=3, start_time_us=500.0,
                        speedup_vs_start=1.17, eager_time_us=300.0, speedup_vs_eager=0.70,
                        best_baseline="eager", best_baseline_us=300.0,
                        best_baseline_spread_us=math.nan, speedup_vs_best=0.70)
    console = Console(file=io.StringIO(), width=160)
    console.print(shape_table(Evaluation("a", Status.OK, shapes=(shape,)), "best", 160))
    text = console.file.getvalue()
    assert "425.65" in text and "300.00" in text
    assert "nan" not in text


def _run(times: list[tuple[float, float, float]]) -> RunData:
    """A run whose best kernel, start and eager took ``times`` (µs) on successive shapes."""
    labels = ["d=4096,dtype=float32,tokens=1", "d=4096,dtype=float32,tokens=16",
              "d=2048,dtype=float32,tokens=64", "d=1024,dtype=float32,tokens=8"]
    shapes = tuple(ShapeFigures(label, best, start, eager, math.nan, "eager", eager, 0.5,
                                eager / best)
                   for label, (best, start, eager) in zip(labels, times, strict=False))
    return RunData(Path("run"), {}, {}, (), shapes, "b", "", "s", "", "cpp")


@pytest.mark.parametrize("times", [
    [(150.0, 170.0, 160.0), (157.0, 175.0, 161.0), (164.0, 180.0, 162.0),
     (171.0, 185.0, 163.0)],  # a short axis: matplotlib labels every minor tick
    [(18.4, 40.4, 31.8), (177.9, 551.5, 131.0), (322.0, 2975.0, 181.9)],  # the quickstart's
    [(0.9, 4000.0, 35.0), (12.0, 90000.0, 400.0)],  # five decades
])
def test_the_time_plot_draws_markers_on_its_log_axis_and_no_label_over_another(times,
                                                                             monkeypatch):
    drawn = []
    monkeypatch.setattr(plots, "_svg", lambda figure: drawn.append(figure) or "<svg/>")
    plots.shape_times(_run(times))
    figure = drawn[0]
    axes = figure.axes[0]
    assert axes.get_xscale() == "log"
    # a bar on a log axis starts nowhere in particular: its length means nothing
    assert not [c for c in axes.containers if isinstance(c, BarContainer)]
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    for axis, limits in ((axes.xaxis, axes.get_xlim()), (axes.yaxis, sorted(axes.get_ylim()))):
        ticks = [*zip(axis.get_majorticklocs(), axis.get_majorticklabels(), strict=True),
                 *zip(axis.get_minorticklocs(), axis.get_minorticklabels(), strict=True)]
        shown = [label.get_window_extent(renderer).padded(2) for at, label in ticks
                 if limits[0] <= at <= limits[1] and label.get_visible() and label.get_text()]
        assert len(shown) >= 2
        for i, box in enumerate(shown):
            assert not any(box.overlaps(other) for other in shown[i + 1:]), axis
    # every time of every shape is on the plot, inside the axis
    low, high = axes.get_xlim()
    assert all(low < t < high for row in times for t in row)
