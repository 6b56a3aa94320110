"""``Archive.diversity`` is kept up to date island by island (it is asked for on every record);
it must give what counting the lineages' bests' families afresh gives, whatever the order of
records and migrations."""

from __future__ import annotations

import random

from kernelswarm.search import Candidate, Evaluation, Migration, ShapeResult, Status
from kernelswarm.search.archive import source_family
from tests.search.islands_archive import IslandsArchive

LINEAGES, FAMILIES, RECORDS = 6, 5, 600


def _counted_afresh(archive: IslandsArchive) -> float:
    bests = [archive.lineage_best(i) for i in archive.islands if i >= 0]
    bests = [b for b in bests if b is not None]
    return len({source_family(c) for c, _ in bests}) / len(bests) if bests else 0.0


def test_diversity_kept_up_to_date_equals_diversity_counted_afresh():
    rng = random.Random(1)
    archive = IslandsArchive(elites=4, island_size=3)
    seen = set()
    for n in range(RECORDS):
        lineage = rng.randrange(-1, LINEAGES)  # -1: a starting kernel's record
        candidate = Candidate.create(language="cpp", entry="k",
                                     source=f"// family {rng.randrange(FAMILIES)}\n",
                                     knobs={"N": n}, knob_space={"N": tuple(range(RECORDS))},
                                     lineage=lineage)
        speedup, ok = rng.uniform(0.5, 2.0), rng.random() > 0.2
        archive.add(candidate, Evaluation(candidate.id, Status.OK if ok else Status.INCORRECT,
                                          "", shapes=(ShapeResult("n=1", correct=ok,
                                                                  time_us=1 / speedup,
                                                                  speedup_vs_start=speedup),)))
        if rng.random() < 0.2:
            topology = rng.choice(["ring", "all", "random"])
            archive.migrate(rng.randrange(LINEAGES), Migration(1, 2, topology), n + 1)
        assert archive.diversity() == _counted_afresh(archive), n
        seen.add(archive.diversity())
    assert len(seen) > 3  # the walk went through several values, not one
