"""A whole search with no language model: built-in roles, two lineages, the real sandboxed
evaluator of silu_and_mul in cpp, run by the in-process executor."""

from __future__ import annotations

from pathlib import Path

from kernelswarm.agents import builtin_roles
from kernelswarm.search import (
    ADOPT,
    Budget,
    Candidate,
    CompileResult,
    Evaluation,
    Evaluator,
    KnobTuner,
    Lineage,
    LocalExecutor,
    Migration,
    RunInfo,
    Status,
    Tracker,
)


def _search(evaluator: Evaluator, start: Candidate, start_eval: Evaluation, tmp_path: Path,
            seeds=(0, 1), candidates=4) -> tuple[Tracker, list[Lineage]]:
    tracker = Tracker(RunInfo("test", "builtin", tmp_path, "silu_and_mul", "cpp", len(seeds)),
                      sinks=[], migration=Migration(interval=2, count=1, topology="ring"))
    lineages = [Lineage(i, start, start_eval, builtin_roles(seed=seed), KnobTuner(seed=seed),
                        Budget(candidates=candidates)) for i, seed in enumerate(seeds)]
    LocalExecutor(evaluator, tracker).run(lineages)
    return tracker, lineages


def test_two_lineages_find_a_faster_correct_kernel_and_share_it(start, evaluator, tmp_path: Path):
    start_eval = evaluator.evaluate(start)
    assert start_eval.status is Status.OK, start_eval.message
    tracker, lineages = _search(evaluator, start, start_eval, tmp_path)
    summary = tracker.summary("done")

    assert summary.best is not None
    best, best_eval = summary.best
    assert best_eval.status is Status.OK
    assert "ks_fast_expf" in best.source  # the rewrite that lets the loop vectorise
    assert best_eval.speedup > 1.3
    # Whichever lineage found it, the other one received it by migration and continued from it
    # (or found it too).
    for lineage in lineages:
        moves = [a.move for a in lineage.history]
        assert "ks_fast_expf" in lineage.current.source or ADOPT in moves
    assert summary.migrations >= 1
    assert all(r.candidate.origin.rationale for r in tracker.records)
    REPLAY.update({r.candidate.id: r.evaluation for r in tracker.records})
    REPLAY["start"] = start_eval
    TRACE[:] = [(r.lineage, r.step, r.candidate.id) for r in tracker.records]


REPLAY: dict[str, Evaluation] = {}  # the verdicts of the search above, by candidate id
TRACE: list[tuple[int, int, str]] = []


class _Replay(Evaluator):
    """Gives back the verdicts a real evaluator gave in the search above; a candidate it never
    judged is a divergence, so it fails the test."""

    def compile(self, candidate):
        known = REPLAY.get(candidate.id)
        assert known is not None, f"the replayed search proposed a new candidate {candidate.id}"
        return CompileResult(candidate.id, ok=known.status is not Status.COMPILE_ERROR,
                             seconds=0.0, log=known.message,
                             binary=known.binary)

    def evaluate(self, candidate):
        return REPLAY[candidate.id]


def test_the_same_seeds_and_verdicts_reproduce_the_same_search(start, tmp_path: Path):
    assert TRACE, "runs after the search above, whose verdicts it replays"
    tracker, _ = _search(_Replay(), start, REPLAY["start"], tmp_path)
    assert [(r.lineage, r.step, r.candidate.id) for r in tracker.records] == TRACE
