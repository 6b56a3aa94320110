"""The lines under the closing table after confirmation: a confirmed kernel whose repeats do not
show a gain over the starting kernel is said to be no gain, not printed as a result."""

from __future__ import annotations

from dataclasses import dataclass

from kernelswarm.experiments.progress import confirmation_lines
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
