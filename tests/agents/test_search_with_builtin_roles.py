"""A whole search with no language model: built-in roles, two lineages, the real sandboxed
evaluator of silu_and_mul in cpp, run by the in-process executor."""

from __future__ import annotations

from pathlib import Path

from kernelswarm.agents import builtin_roles
from kernelswarm.search import (
    ADOPT,
    Budget,
    KnobTuner,
    Lineage,
    LocalExecutor,
    RunInfo,
    Status,
    Tracker,
)


def test_two_lineages_find_a_faster_correct_kernel_and_share_it(start, evaluator, tmp_path: Path):
    tracker = Tracker(RunInfo("test", "builtin", tmp_path, "silu_and_mul", "cpp", 2), sinks=[])
    start_eval = evaluator.evaluate(start)
    assert start_eval.status is Status.OK, start_eval.message
    lineages = [Lineage(i, start, start_eval, builtin_roles(seed=i), KnobTuner(seed=i),
                        Budget(candidates=4)) for i in range(2)]
    summary = LocalExecutor(evaluator, tracker).run(lineages)

    assert summary.best is not None
    best, best_eval = summary.best
    assert best_eval.status is Status.OK
    assert "ks_fast_expf" in best.source  # the rewrite that lets the loop vectorise
    assert best_eval.speedup > 1.3
    # Whichever lineage found it, the other one continued from it (or found it too).
    for lineage in lineages:
        moves = [a.move for a in lineage.history]
        assert "ks_fast_expf" in lineage.current.source or ADOPT in moves
    assert all(r.candidate.origin.rationale for r in tracker.records)
