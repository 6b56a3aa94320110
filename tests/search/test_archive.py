"""Islands, migration, diversity and deduplication in the archive and the tracker."""

from __future__ import annotations

import pytest

from kernelswarm.search import (
    Candidate,
    Evaluation,
    Migration,
    RunInfo,
    ShapeResult,
    Status,
    Tracker,
    source_family,
)
from tests.search.islands_archive import IslandsArchive


def _kernel(lineage: int, name: str, knob: int = 1) -> Candidate:
    return Candidate.create(language="cpp", source=f"// {name}", entry="f", lineage=lineage,
                            knob_space={"K": (1, 2, 3)}, knobs={"K": knob})


def _ok(candidate: Candidate, speedup: float, binary: str = "") -> Evaluation:
    return Evaluation(candidate.id, Status.OK, shapes=(
        ShapeResult("n=1", correct=True, time_us=1.0, speedup_vs_start=speedup),),
        binary=binary)


def _filled(n_lineages: int = 3) -> IslandsArchive:
    archive = IslandsArchive(elites=3, island_size=4)
    for lineage in range(n_lineages):
        for i, speedup in enumerate((1.1, 1.5, 1.2)):
            k = _kernel(lineage, f"l{lineage}-k{i}")
            archive.add(k, _ok(k, speedup + lineage))
    return archive


def test_ring_migration_brings_the_next_islands_best_and_it_joins_the_island():
    archive = _filled()
    moved = archive.migrate(0, Migration(interval=1, count=2, topology="ring"), step=1)
    assert [c.lineage for c, _ in moved] == [1, 1]
    assert [round(e.speedup, 2) for _, e in moved] == [2.5, 2.2]
    assert all(archive.islands[0].holds(c.id) for c, _ in moved)
    assert archive.lineage_best(0)[1].speedup == pytest.approx(1.5)  # its own best is unchanged
    assert archive.migrate(2, Migration(1, 1, "ring"), 1)[0][0].lineage == 0  # wraps around
    assert archive.migrations[0] == (1, 0, moved[0][0].id)


def test_a_kernel_is_not_sent_twice_and_unseen_families_come_first():
    archive = _filled(2)
    migration = Migration(interval=1, count=1, topology="all")
    first = archive.migrate(0, migration, 1)
    second = archive.migrate(0, migration, 2)
    assert first[0][0].id != second[0][0].id
    # a knob variant of a family lineage 0 already holds ranks after a new family
    archive2 = IslandsArchive()
    own = _kernel(0, "shared")
    archive2.add(own, _ok(own, 1.0))
    twin = _kernel(1, "shared", knob=2)  # same source, other knob: same family
    fresh = _kernel(1, "different")
    archive2.add(twin, _ok(twin, 3.0))
    archive2.add(fresh, _ok(fresh, 2.0))
    assert source_family(twin) == source_family(own)
    moved = archive2.migrate(0, Migration(interval=1, count=1, topology="ring"), 1)
    assert moved[0][0].id == fresh.id


def test_random_topology_is_reproducible_with_the_seed():
    picks = [[c.lineage for c, _ in _filled(5).migrate(0, Migration(1, 1, "random", seed=s), 4)]
             for s in (1, 1, 2, 3, 4, 5)]
    assert picks[0] == picks[1]
    assert len({p[0] for p in picks}) > 1  # other seeds draw other islands


def test_the_global_best_survives_any_number_of_later_elites():
    archive = IslandsArchive(elites=2)
    best = _kernel(0, "best")
    archive.add(best, _ok(best, 9.0))
    for i in range(50):
        k = _kernel(i % 4, f"other{i}")
        archive.add(k, _ok(k, 1.0 + i / 100))
        archive.migrate(i % 4, Migration(1, 2, "all"), i + 1)
    assert archive.best[0].id == best.id and len(archive.elites) == 2


def test_diversity_is_one_when_lineages_differ_and_falls_when_they_collapse():
    archive = _filled(4)
    assert archive.diversity() == 1.0
    shared = "// everyone ends here"
    for lineage in range(4):
        k = Candidate.create(language="cpp", source=shared, entry="f", lineage=lineage,
                             knob_space={"K": (1, 2, 3)}, knobs={"K": 1 + lineage % 3})
        archive.add(k, _ok(k, 10.0))
    assert archive.diversity() == 0.25


def test_the_tracker_migrates_on_the_interval_and_reuses_a_verdict_for_the_same_binary(tmp_path):
    run = RunInfo("r", "r", tmp_path, "t", "cpp", 2)
    tracker = Tracker(run, [], migration=Migration(interval=3, count=1, topology="ring"))
    a, b = _kernel(0, "a"), _kernel(1, "b")
    tracker.record(0, 1, a, _ok(a, 1.5, binary="abc"))
    tracker.record(1, 1, b, _ok(b, 2.0))
    assert tracker.migrants(0, 1) == [] and tracker.migrants(0, 2) == []
    assert [c.id for c, _ in tracker.migrants(0, 3)] == [b.id]
    twin = _kernel(1, "a with another comment")
    reused = tracker.lookup_binary(twin.id, "abc")
    assert reused.candidate_id == twin.id and reused.speedup == pytest.approx(1.5)
    assert reused.eval_s == 0.0 and f"same compiled binary as {a.id}" in reused.message
    assert tracker.lookup_binary(a.id, "abc") is None  # its own binary is no duplicate
    assert tracker.lookup_binary(twin.id, "other") is None
    summary = tracker.close("done")
    assert summary.migrations == 1 and summary.reused == 1 and summary.diversity == 1.0
