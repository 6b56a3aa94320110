"""``kernelswarm report`` on a real CPU run: one self-contained HTML file with the plots, the best
kernel and every baseline; a sweep folder gets a cell table and a plot."""

from __future__ import annotations

import re
import shutil

import pytest

from kernelswarm.experiments.commands.cli import main
from kernelswarm.experiments.report.writer import (
    ReportError,
    confirmation_lines,
    run_description,
    write_report,
)
from kernelswarm.experiments.sinks import read_evaluations

pytestmark = pytest.mark.slow


def test_the_report_of_a_run_embeds_its_plots_and_names_the_best_kernel_and_every_baseline(
        small_run, capsys):
    outcome, _, _ = small_run
    assert main(["report", str(outcome.run_dir)]) == 0
    printed = capsys.readouterr().out
    page = outcome.run_dir / "report" / "report.html"
    assert str(page) in printed.splitlines()  # the path whole, on its own line
    html = page.read_text()
    assert html.count("<svg") >= 4  # inline: the file opens with no server and no network
    for fetch in ('src="http', "src='http", 'href="http', "<script", "<link", "@import"):
        assert fetch not in html  # nothing to fetch: no server, no network
    best = outcome.result.summary.best[0]
    assert best.id in html
    assert "Diff against the starting kernel" in html and "+++ best kernel" in html
    baselines = outcome.result.start.baselines
    for name in ["eager", "compile", *baselines.skipped]:
        assert re.search(rf"<td>{re.escape(name)}</td>", html), name
    for plot in ("best_over_time", "shape_times", "roofline", "verdicts"):
        assert (outcome.run_dir / "report" / f"{plot}.svg").read_text().startswith("<svg")
    markdown = (outcome.run_dir / "report" / "report.md").read_text()
    assert best.id in markdown and "![" in markdown
    # the best kernel's figure is the confirmed one: the page says so, and what the search saw
    confirmation = outcome.result.confirmation
    if confirmation is not None and confirmation.chosen is not None:
        chosen = confirmation.chosen
        assert f"{chosen.candidate.id} (reported above): judged {len(chosen.repeats)} more " \
               f"times after the search" in html
        assert f"the search had measured {chosen.found.speedup:.3f}x" in html
    else:
        assert "Not judged again after the search" in html


def test_the_report_and_the_console_give_the_best_kernel_the_same_figures(small_run):
    outcome, text, _ = small_run
    write_report(outcome.run_dir)
    markdown = (outcome.run_dir / "report" / "report.md").read_text()
    best = outcome.result.summary.best[1]
    console = " ".join(text.split())
    for shape in best.shapes:
        # the report's per-shape row: the kernel's time and its speedup over the best baseline
        row = next(ln for ln in markdown.splitlines() if ln.startswith(f"| {shape.shape} |"))
        assert f"| {shape.time_us:.2f} |" in row, (row, shape.time_us)
        assert f"| {shape.speedup_vs_best:.3f}x |" in row, (row, shape.speedup_vs_best)
        # the console's closing table, from the same evaluation
        assert f"{shape.speedup_vs_best:.3f}x" in console, shape.shape


def test_the_report_page_uses_its_width_and_cuts_no_stop_reason(small_run):
    import html as html_module

    outcome, _, _ = small_run
    report = write_report(outcome.run_dir)
    page = report.html.read_text()
    assert "figure svg{width:100%;height:auto}" in page  # plots as wide as the text
    for lineage in outcome.result.lineages:  # each lineage's reason whole, in its row
        first = (lineage.stop_reason or "").splitlines()[0]
        assert f"<td>{html_module.escape(first)}</td>" in page
    migrants = any(r.origin_role == "migrant" for r in read_evaluations(outcome.run_dir)
                   .to_pandas().itertuples())
    assert ("triangles: a migrant" in page) == migrants  # no legend for what is not drawn


CONFIRMED = {"repeats": 3, "skipped": None, "chosen": "b", "kernels": [
    {"candidate_id": "a", "found_speedup_vs_start": 3.7, "speedup_vs_start": [3.6, 2.8, 2.7],
     "median_speedup_vs_start": 2.8, "failure": None},
    {"candidate_id": "b", "found_speedup_vs_start": 3.5, "speedup_vs_start": [3.2, 3.0, 2.9],
     "median_speedup_vs_start": 3.0, "failure": None},
    {"candidate_id": "c", "found_speedup_vs_start": 4.0, "speedup_vs_start": [],
     "median_speedup_vs_start": None, "failure": "repeat 1: INCORRECT on shape d=7"}]}


def test_the_confirmation_is_told_kernel_by_kernel_against_what_the_search_measured():
    lines = confirmation_lines({"confirmation": CONFIRMED})
    assert lines == [
        "a: judged 3 more times after the search, median 2.800x vs start (2.700x to 3.600x); "
        "the search had measured 3.700x.",
        "b (reported above): judged 3 more times after the search, median 3.000x vs start "
        "(2.900x to 3.200x); the search had measured 3.500x.",
        "c: judged again, failed: repeat 1: INCORRECT on shape d=7"]
    assert confirmation_lines({"confirmation": {**CONFIRMED, "skipped": "interrupted"}}) == [
        "Unconfirmed: not judged again after the search (interrupted): the figures are the "
        "search's own single measurement, which favours a lucky one."]
    assert confirmation_lines({"confirmation": None})[0].startswith("Not judged again")


def test_the_mlflow_description_gives_the_best_kernel_its_baseline_and_confirmation():
    summary = {"best": {"candidate_id": "b", "language": "cpp", "speedup_vs_start": 3.0,
                        "speedup_vs_best": 1.4, "speedup_vs_best_ci": 0.03,
                        "shapes": [{"best_baseline": "eager"}, {"best_baseline": "compile"}]},
               "timing": {"regime": "cold cache (L2 flushed)"}, "confirmation": CONFIRMED,
               "stop_reason": "candidate budget reached (10)"}
    text = run_description(summary, "silu_and_mul")
    assert text.startswith("**silu_and_mul**: best kernel `b` (cpp), 3.000x vs the starting "
                           "kernel and 1.400x ±0.030 vs the best baseline of each shape "
                           "(compile, eager), timed with a cold cache (L2 flushed).")
    assert "- b (reported above): judged 3 more times" in text
    assert "report/report.html" in text and "candidate budget reached (10)" in text
    nothing = run_description({"best": None, "stop_reason": "every candidate failed"}, "op")
    assert nothing == "**op**: no kernel was found correct. Stopped: every candidate failed."


def test_a_sweep_folder_gets_a_cell_table_and_a_plot(small_run, tmp_path):
    outcome, _, _ = small_run
    sweep = tmp_path / "sweep"
    for cell in ("cell-a", "cell-b"):
        shutil.copytree(outcome.run_dir, sweep / cell)
    report = write_report(sweep)
    html = report.html.read_text()
    assert "cell-a" in html and "cell-b" in html and html.count("<svg") >= 1
    assert "| cell |" in report.markdown.read_text()


def test_a_folder_that_is_no_run_is_refused_by_name(tmp_path, capsys):
    with pytest.raises(ReportError, match="neither a kernelswarm run folder"):
        write_report(tmp_path)
    assert main(["report", str(tmp_path)]) == 2
    assert str(tmp_path) in capsys.readouterr().out
