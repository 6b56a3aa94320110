"""Search strategies (search/strategies/): the seam, MAP-Elites' cells and draws, novelty
rejection on its own and in a driven search, and the configuration that chooses them."""

from __future__ import annotations

import math

import pytest

from kernelswarm.search import (
    STRATEGIES,
    Archive,
    Budget,
    Candidate,
    Evaluation,
    KnobTuner,
    Lineage,
    LocalExecutor,
    Migration,
    Origin,
    Population,
    Roles,
    RunInfo,
    ShapeResult,
    Status,
    Tracker,
    make_strategy,
)
from kernelswarm.search.lineage import MAX_REJECTIONS, NOT_NOVEL
from kernelswarm.search.strategies import Option, strategy_options
from kernelswarm.search.strategies.map_elites import MapElites, structure, winning_shape
from kernelswarm.search.strategies.novelty import Novelty, shingles, similarity
from tests.search.test_driver import Judge, _Append, _kernel, _Moves, _Quiet

KERNEL = """extern "C" void scale(float* out, const float* x, long n) {
    for (long i = 0; i < n; ++i) {
        out[i] = 2.0f * x[i];
    }
}
"""


def _candidate(lineage: int, source: str, language: str = "cpp", role: str = "coder",
               move: str = "rewrite:x", knob: int = 1) -> Candidate:
    return Candidate.create(language=language, source=source, entry="scale", lineage=lineage,
                            knob_space={"K": (1, 2)}, knobs={"K": knob},
                            origin=Origin(role=role, move=move))


def _timed(candidate: Candidate, **speedups: float) -> Evaluation:
    return Evaluation(candidate.id, Status.OK, shapes=tuple(
        ShapeResult(shape, correct=True, time_us=10 / s, speedup_vs_start=s)
        for shape, s in speedups.items()))


def _map_elites(descriptors=("language", "structure", "shape"), count: int = 2,
                seed: int = 0) -> tuple[Archive, MapElites]:
    archive = Archive()
    strategy = make_strategy(Population("map_elites", migration=Migration(1, count, seed=seed),
                                        options={"descriptors": list(descriptors)}), archive)
    assert isinstance(strategy, MapElites)
    return archive, strategy


def _add(archive: Archive, strategy, candidate: Candidate, evaluation: Evaluation) -> None:
    archive.add(candidate, evaluation)
    strategy.add(candidate, evaluation)


def test_the_strategies_are_the_modules_of_the_package_and_an_unknown_one_is_named():
    assert set(STRATEGIES) == {"islands", "map_elites"}
    with pytest.raises(ValueError, match="unknown search strategy 'novelty'.*islands, map_elites"):
        make_strategy(Population("novelty"), Archive())
    with pytest.raises(ValueError, match="map_elites option descriptors must be a list of "
                                         "some of language, structure, shape, move"):
        make_strategy(Population("map_elites", options={"descriptors": ["colour"]}), Archive())


def test_a_strategy_takes_the_options_it_declares_checked_and_no_other():
    declared = strategy_options()
    assert [o.name for o in declared["islands"]] == ["island_size"]
    assert [o.name for o in declared["map_elites"]] == ["descriptors"]
    islands = make_strategy(Population("islands"), Archive())
    assert islands.option("island_size") == 8  # the declared default
    with pytest.raises(ValueError, match="islands has no option 'size'; its options: "
                                         "island_size"):
        make_strategy(Population("islands", options={"size": 4}), Archive())
    with pytest.raises(ValueError, match="islands option island_size must be an integer >= 1"):
        make_strategy(Population("islands", options={"island_size": True}), Archive())
    with pytest.raises(ValueError, match="names shape more than once"):
        make_strategy(Population("map_elites", options={"descriptors": ["shape", "shape"]}),
                      Archive())


def test_an_option_checks_its_values_as_declared():
    ratio = Option("ratio", float, 0.5, "a share", minimum=0, maximum=1)
    assert ratio.check(1) == 1.0 and isinstance(ratio.check(1), float)
    assert ratio.allowed() == "a number from 0 to 1"
    for bad in (1.5, "0.5", True):
        with pytest.raises(ValueError, match="must be a number from 0 to 1"):
            ratio.check(bad)
    mode = Option("mode", str, "fast", "how", choices=("fast", "slow"))
    with pytest.raises(ValueError, match="must be one of fast, slow"):
        mode.check("medium")
    with pytest.raises(ValueError, match="option size: its default 0 must be an integer >= 1"):
        Option("size", int, 0, "kernels kept", minimum=1)


def test_map_elites_keeps_a_slower_kernel_that_wins_another_shape():
    archive, strategy = _map_elites(descriptors=("shape",))
    small = _candidate(0, KERNEL + "// small")
    large = _candidate(1, KERNEL + "// large")
    _add(archive, strategy, small, _timed(small, **{"n=1": 3.0, "n=4096": 1.1}))
    _add(archive, strategy, large, _timed(large, **{"n=1": 0.9, "n=4096": 1.6}))
    # The second is slower overall (geomean 1.2 against 1.8) but the better one at n=4096: both
    # are kept, each in its cell, where an island of one would keep the first alone.
    assert strategy.cells.keys() == {("n=1",), ("n=4096",)}
    faster_small = _candidate(1, KERNEL + "// smaller")
    _add(archive, strategy, faster_small, _timed(faster_small, **{"n=1": 4.0, "n=4096": 1.0}))
    assert strategy.cells[("n=1",)][0].id == faster_small.id and strategy.replaced == 1
    assert {c.id for c, _ in strategy.kept()} == {faster_small.id, large.id}
    assert strategy.figures()["cells"] == 2


def test_map_elites_descriptors_read_the_source_and_the_shapes():
    marked = _candidate(0, "// kernelswarm structure: warp_rows\n" + KERNEL)
    routed = _candidate(0, KERNEL.replace("scale(", "scale__route0("))
    plain = _candidate(0, KERNEL)
    evaluation = _timed(plain, **{"n=1": 1.0, "n=8": 2.0})
    assert [structure(c, evaluation) for c in (marked, routed, plain)] == \
        ["warp_rows", "dispatch", "base"]
    assert winning_shape(plain, evaluation) == "n=8"
    untimed = Evaluation(plain.id, Status.OK, shapes=(ShapeResult("n=1", correct=True),))
    assert winning_shape(plain, untimed) == "untimed"


def test_map_elites_hands_a_lineage_other_lineages_kernels_of_its_language_once_each():
    archive, strategy = _map_elites(descriptors=("language", "shape"), count=1, seed=3)
    kernels = [_candidate(lineage, KERNEL + f"// {lineage} {shape}")
               for lineage in (0, 1, 2) for shape in ("a", "b")]
    for i, k in enumerate(kernels):
        _add(archive, strategy, k, _timed(k, **{f"n={k.source[-1]}": 1.0 + i / 10}))
    triton = _candidate(1, "def scale(): pass  # c", language="triton")
    _add(archive, strategy, triton, _timed(triton, **{"n=9": 5.0}))
    received = [m for step in range(1, 8) for m in strategy.share(0, step)]
    assert all(c.lineage != 0 and c.language == "cpp" for c, _ in received)
    assert len({c.id for c, _ in received}) == len(received)  # none twice
    assert {c.id for c, _ in received} == {c.id for c, _ in strategy.kept()
                                           if c.lineage != 0 and c.language == "cpp"}
    # The draw is the seed's: the same settings draw the same kernels.
    again_archive, again = _map_elites(descriptors=("language", "shape"), count=1, seed=3)
    for k in (*kernels, triton):
        _add(again_archive, again, k, archive.seen(k.id))
    assert [c.id for c, _ in again.share(0, 1)] == [received[0][0].id]


def test_closeness_ignores_comments_and_layout_and_sees_a_changed_statement():
    relaid = KERNEL.replace("    ", "\t").replace("\n", "\n\n") + "// a new comment\n"
    assert similarity(shingles(KERNEL), shingles(relaid)) == 1.0
    changed = KERNEL.replace("2.0f * x[i]", "x[i] + x[i]")
    assert 0.3 < similarity(shingles(KERNEL), shingles(changed)) < 0.9


def test_novelty_rejects_only_the_coders_near_copies_with_the_same_knobs():
    novelty = Novelty(0.95)
    judged = _candidate(0, KERNEL)
    novelty.judged(judged)
    copy = _candidate(1, KERNEL + "// same kernel, other words")
    rejection = novelty.check(copy)
    assert rejection is not None and rejection.near == judged.id
    assert rejection.similarity == 1.0 and "novelty rejection" in rejection.message
    assert novelty.check(_candidate(1, KERNEL.replace("2.0f * x[i]", "x[i] + x[i]"))) is None
    assert novelty.check(_candidate(1, KERNEL + "//", knob=2)) is None  # the tuner's business
    assert novelty.check(_candidate(1, KERNEL + "//", role="tuner", move="tune")) is None
    assert novelty.check(_candidate(1, KERNEL + "//", move="repair")) is None
    assert novelty.check(_candidate(1, KERNEL + "//", language="cuda")) is None
    assert len(novelty.rejected) == 1
    assert Novelty(0.0).check(copy) is None  # 0: off


def test_a_search_with_novelty_judges_no_near_copy_and_counts_what_it_rejected(tmp_path):
    # The scripted coder appends lines; each "// fast" makes the kernel 1.5x faster (the
    # judge's rule), "// comment" lines change nothing a compiler sees.
    moves = ["rewrite:// fast\nstep_one();", "rewrite:// comment: a", "rewrite:// comment: b",
             "rewrite:// fast\nstep_two();"]
    judge = Judge(eval_s=0.5)
    start = _kernel("int f();")
    start_eval = judge.evaluate(start)

    def run(novelty: float) -> tuple[Tracker, Lineage]:
        tracker = Tracker(RunInfo("r", "n", tmp_path, "t", "cpp", 1), sinks=[],
                          population=Population(novelty=novelty))
        tracker.record(-1, 0, start, start_eval)
        lineage = Lineage(0, start, start_eval, Roles(_Moves(moves), _Append(), _Quiet()),
                          KnobTuner(seed=0), Budget())
        LocalExecutor(judge, tracker).run([lineage])
        return tracker, lineage

    judge.compiled.clear()
    tracker, lineage = run(0.0)
    assert len(judge.compiled) == 4 and tracker.summary("done").rejected == 0
    judge.compiled.clear()
    tracker, lineage = run(0.9)
    # The two comment-only candidates are neither compiled nor recorded; the lineage goes on.
    assert len(judge.compiled) == 2
    assert [a.status for a in lineage.history] == ["OK", NOT_NOVEL, NOT_NOVEL, "OK"]
    assert len(tracker.records) == 1 + 2
    summary = tracker.summary("done")
    assert summary.rejected == 2 and summary.strategy == "islands"
    assert summary.best[1].speedup == pytest.approx(1.5 ** 2)
    assert tracker.figures()["rejected"] == 2


def test_a_lineage_that_proposes_only_near_copies_stops_and_says_why(tmp_path):
    moves = ["rewrite:// fast\nstep();"] + [f"rewrite:// comment: {i}" for i in range(20)]
    judge = Judge()
    start = _kernel("int f();")
    tracker = Tracker(RunInfo("r", "n", tmp_path, "t", "cpp", 1), sinks=[],
                      population=Population(novelty=0.9))
    start_eval = judge.evaluate(start)
    lineage = Lineage(0, start, start_eval, Roles(_Moves(moves), _Append(), _Quiet()),
                      KnobTuner(seed=0), Budget())
    LocalExecutor(judge, tracker).run([lineage])
    assert lineage.rejected == MAX_REJECTIONS and "no novel candidate" in lineage.stop_reason


def test_the_islands_and_map_elites_runs_share_one_driver_and_both_find_the_best(tmp_path):
    moves = [f"rewrite:// fast\nstep_{i}();" for i in range(3)]
    for strategy in STRATEGIES:
        judge = Judge()
        start = _kernel("int f();")
        start_eval = judge.evaluate(start)
        tracker = Tracker(RunInfo("r", strategy, tmp_path, "t", "cpp", 2), sinks=[],
                          population=Population(strategy, migration=Migration(1, 1)))
        tracker.record(-1, 0, start, start_eval)
        lineages = [Lineage(i, start, start_eval, Roles(_Moves(moves), _Append(), _Quiet()),
                            KnobTuner(seed=i), Budget()) for i in range(2)]
        summary = LocalExecutor(judge, tracker).run(lineages)
        assert summary.strategy == strategy
        assert math.isclose(summary.best[1].speedup, 1.5 ** 3)
        assert tracker.strategy.kept()
