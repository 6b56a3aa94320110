"""The lines under the closing table after confirmation: a confirmed kernel whose repeats do not
show a gain over the starting kernel is said to be no gain, not printed as a result."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kernelswarm.experiments.views.progress import confirmation_lines
from kernelswarm.search import Candidate, Confirmation, Confirmed, Evaluation, ShapeResult, Status


def _evaluation(candidate: Candidate, speedup: float) -> Evaluation:
    return Evaluation(candidate.id, Status.OK, shapes=(
        ShapeResult("n=1", correct=True, time_us=10.0 / speedup, speedup_vs_start=speedup),))


@dataclass
class _Result:  # what confirmation_lines reads of a SwarmResult
    confirmation: Confirmation


def _lines(found: float, repeats: tuple[float, ...]) -> list[str]:
    kernel = Candidate.create(language="cpp", source="k", entry="f")
    confirmed = Confirmed(kernel, _evaluation(kernel, found),
                          tuple(_evaluation(kernel, s) for s in repeats))
    confirmation = Confirmation(len(repeats), (confirmed,), confirmed, wall_s=1.0)
    return [line.plain for line in confirmation_lines(_Result(confirmation))]


def test_a_gain_every_repeat_shows_is_reported_without_a_warning():
    [line] = _lines(1.4, (1.30, 1.25, 1.32))
    assert "1.300x vs start (median; 1.250x to 1.320x)" in line and "1.400x" in line


def test_repeats_around_one_are_no_gain_and_repeats_below_one_keep_the_start():
    assert _lines(1.05, (0.98, 1.01, 0.998))[1] == (
        "the repeats' range includes 1.0x: no gain over the starting kernel beyond noise")
    assert _lines(1.05, (0.97, 0.95, 0.99))[1] == (
        "every repeat was slower than the starting kernel: keep the starting kernel")


def _closing(best: Candidate, best_speedup: float, start: Candidate,
             lineage_best: dict, baseline: str = "") -> str:
    import io

    from rich.console import Console

    from kernelswarm.cluster.lineage_actor import LineageResult
    from kernelswarm.cluster.swarm import SwarmResult
    from kernelswarm.experiments.views.progress import closing_table
    from kernelswarm.search import RunSummary

    def timed(candidate: Candidate, speedup: float) -> Evaluation:
        return Evaluation(candidate.id, Status.OK, shapes=(ShapeResult(
            "n=1", correct=True, time_us=10.0 / speedup, speedup_vs_start=speedup,
            speedup_vs_start_ci=0.04, best_baseline=baseline, best_baseline_us=5.0,
            speedup_vs_best=0.5 * speedup),))

    summary = RunSummary("done", 4, (best, timed(best, best_speedup)),
                         {i: (c, timed(c, s)) for i, (c, s) in lineage_best.items()}, 1.0)
    result = SwarmResult(summary, timed(start, 1.0),
                         [LineageResult(i, 2, "done", 1.0) for i in lineage_best], [], [], {})
    console = Console(file=io.StringIO(), width=200)
    console.print(closing_table(result, "", 200))
    return console.file.getvalue()


def test_the_starting_kernel_as_the_overall_best_is_labelled_and_its_noise_marked():
    start = Candidate.create(language="cpp", source="start", entry="f")
    slower = Candidate.create(language="cpp", source="slower", entry="f", lineage=0)
    text = _closing(start, 1.028, start, {0: (slower, 0.9)})
    row = next(line for line in text.splitlines() if "overall" in line)
    assert "overall = start" in row and "1.028x ±0.040 ≈" in row


def test_a_best_kernel_that_is_no_lineages_best_names_its_lineage():
    start = Candidate.create(language="cpp", source="start", entry="f")
    first = Candidate.create(language="cpp", source="a", entry="f", lineage=0)
    runner_up = Candidate.create(language="cpp", source="b", entry="f", lineage=1)
    best_of_1 = Candidate.create(language="cpp", source="c", entry="f", lineage=1)
    text = _closing(runner_up, 1.3, start, {0: (first, 1.2), 1: (best_of_1, 1.5)})
    row = next(line for line in text.splitlines() if "(lineage 1)" in line)
    # not judged again after the search (no confirmation here): its figure says so
    assert "unconfirmed (lineage 1)" in row and runner_up.id in row
    assert "unconfirmed: the best kernel was not judged again after the search" in text


@pytest.mark.parametrize("baseline, heading", [("eager", "vs eager"),
                                               ("compile", "vs best baseline")])
def test_a_figure_over_eager_alone_is_headed_vs_eager(baseline, heading):
    from kernelswarm.experiments.views.evaluation_view import verdict_text

    start = Candidate.create(language="cpp", source="start", entry="f")
    best = Candidate.create(language="cpp", source="a", entry="f", lineage=0)
    text = _closing(best, 1.5, start, {0: (best, 1.5)}, baseline)
    assert heading in text.splitlines()[2]  # the closing table's header row
    verdict = verdict_text(Evaluation(best.id, Status.OK, "ok", shapes=(ShapeResult(
        "n=1", correct=True, time_us=2.0, speedup_vs_start=1.5, best_baseline=baseline,
        speedup_vs_best=0.9, speedup_vs_eager=0.9),)))
    assert ("vs PyTorch eager (the only baseline measured)" in verdict) == (baseline == "eager")
