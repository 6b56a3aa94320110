"""Kernels of several languages in one archive: ranked against one reference starting kernel,
migrating only within their language, confirmed by the same measure."""

from __future__ import annotations

import pytest

from kernelswarm.search import (
    Candidate,
    Confirmation,
    Confirmed,
    Evaluation,
    LanguageScales,
    Migration,
    Origin,
    ShapeResult,
    Status,
    choose,
)
from tests.search.islands_archive import IslandsArchive

SHAPES = ("n=1", "n=2")


def _kernel(language: str, lineage: int, name: str) -> Candidate:
    return Candidate.create(language=language, source=f"{name} {language}", entry="f",
                            lineage=lineage)


def _start(language: str) -> Candidate:
    return Candidate.create(language=language, source=f"start {language}", entry="f",
                            origin=Origin(role="seed", move="start"))


def _timed(candidate: Candidate, times_us: tuple[float, ...], speedup: float = 1.0) -> Evaluation:
    return Evaluation(candidate.id, Status.OK, shapes=tuple(
        ShapeResult(s, correct=True, time_us=t, speedup_vs_start=speedup)
        for s, t in zip(SHAPES, times_us, strict=True)))


def _archive(**kwargs) -> IslandsArchive:
    """cpp's starting kernel takes 10 µs a shape, triton's 40 µs: a triton kernel must be more
    than 4x faster than its own start to beat the cpp start."""
    archive = IslandsArchive(**kwargs)
    for language, us in (("cpp", 10.0), ("triton", 40.0)):
        start = _start(language)
        archive.add(start, _timed(start, (us, us)))
    return archive


def test_the_scale_is_each_starts_speed_against_the_reference_start():
    archive = _archive()
    assert archive.scales.reference == "cpp"
    assert archive.scales.scale("cpp") == 1.0
    assert archive.scales.scale("triton") == pytest.approx(0.25)


def test_the_best_overall_is_ranked_against_the_reference_not_each_languages_own_start():
    archive = _archive()
    fast_ratio = _kernel("triton", 1, "a")  # 3x its own start: 0.75x the cpp start
    modest = _kernel("cpp", 0, "b")  # 1.2x the cpp start
    archive.add(fast_ratio, _timed(fast_ratio, (13.3, 13.3), speedup=3.0))
    archive.add(modest, _timed(modest, (8.3, 8.3), speedup=1.2))
    best = archive.best
    assert best[0].id == modest.id
    assert archive.measure(best) == pytest.approx(1.2)
    assert archive.measure((fast_ratio, archive.seen(fast_ratio.id))) == pytest.approx(0.75)
    # a triton kernel 6x its own start is 1.5x the cpp start: the best overall
    faster = _kernel("triton", 1, "c")
    archive.add(faster, _timed(faster, (6.7, 6.7), speedup=6.0))
    assert archive.best[0].id == faster.id


def test_each_languages_best_stays_among_the_elites():
    archive = _archive(elites=2)
    slow = _kernel("triton", 1, "slow")
    archive.add(slow, _timed(slow, (20.0, 20.0), speedup=2.0))  # 0.5x the reference
    for i in range(4):
        k = _kernel("cpp", 0, f"cpp{i}")
        archive.add(k, _timed(k, (5.0, 5.0), speedup=2.0 + i))
    languages = [c.language for c, _ in archive.elites]
    assert languages[:2] == ["cpp", "cpp"] and slow.id in [c.id for c, _ in archive.elites]


@pytest.mark.parametrize("topology", ["ring", "all", "random"])
def test_migrants_come_only_from_lineages_of_the_same_language(topology):
    archive = _archive()
    migration = Migration(interval=1, count=4, topology=topology, languages=("cpp", "triton"))
    for lineage in range(4):  # 0, 2: cpp; 1, 3: triton
        language = migration.language_of(lineage)
        for i in range(3):
            k = _kernel(language, lineage, f"l{lineage}k{i}")
            archive.add(k, _timed(k, (9.0, 9.0), speedup=1.1 + i + lineage))
    for lineage in range(4):
        moved = [m for step in (1, 2, 3) for m in archive.migrate(lineage, migration, step)]
        assert moved and {c.language for c, _ in moved} == {migration.language_of(lineage)}
        assert all(c.lineage % 2 == lineage % 2 for c, _ in moved if c.lineage >= 0)
    assert all(archive.island(i).members[0][0].language == migration.language_of(i)
               for i in range(4))


def test_confirmation_chooses_by_the_reference_measure_and_per_language():
    archive = _archive()
    scales = archive.scales
    cpp, triton = _kernel("cpp", 0, "x"), _kernel("triton", 1, "y")

    def confirmed(candidate: Candidate, speedup: float) -> Confirmed:
        evaluation = _timed(candidate, (1.0, 1.0), speedup)
        return Confirmed(candidate, evaluation, (evaluation,) * 3)

    kernels = (confirmed(triton, 3.0), confirmed(cpp, 1.1))  # the search ranked triton first
    assert choose(kernels).candidate.id == triton.id  # each kernel's own ratio: triton
    result = Confirmation(3, kernels, choose(kernels, scales), 1.0, scales=scales)
    assert result.chosen.candidate.id == cpp.id  # 1.1x against 0.75x the reference start
    assert result.chosen_in("triton").candidate.id == triton.id
    assert result.as_dict()["median_speedup_vs_reference"][triton.id] == pytest.approx(0.75)


def test_starts_that_cannot_be_compared_are_refused():
    cpp, triton = _start("cpp"), _start("triton")
    other_shapes = Evaluation(triton.id, Status.OK, shapes=(
        ShapeResult("n=3", correct=True, time_us=1.0, speedup_vs_start=1.0),))
    with pytest.raises(ValueError, match="cannot be compared"):
        LanguageScales.of_starts([(cpp, _timed(cpp, (1.0, 1.0))), (triton, other_shapes)])
