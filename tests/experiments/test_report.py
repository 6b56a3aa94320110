"""``kernelswarm report`` on a real CPU run: one self-contained HTML file with the plots, the best
kernel and every baseline; a sweep folder gets a cell table and a plot."""

from __future__ import annotations

import re
import shutil

import pytest

from kernelswarm.experiments.cli import main
from kernelswarm.experiments.report import ReportError, write_report

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
    summary_baselines = outcome.result.start.metrics["baselines"]
    for name in ["eager", "compile", *summary_baselines.get("skipped", {})]:
        assert re.search(rf"<td>{re.escape(name)}</td>", html), name
    for plot in ("best_over_time", "shape_times", "roofline", "verdicts"):
        assert (outcome.run_dir / "report" / f"{plot}.svg").read_text().startswith("<svg")
    markdown = (outcome.run_dir / "report" / "report.md").read_text()
    assert best.id in markdown and "![" in markdown


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
