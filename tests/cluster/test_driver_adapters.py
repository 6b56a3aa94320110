"""The Ray actors add no logic to the search driver: the same lineages, roles, seeds and
evaluator give the same records, step for step, through ``LocalExecutor`` in one process and
through ``Swarm`` (TrackerActor, EvalWorker, LineageActor) on a real local Ray instance."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
import ray

from kernelswarm.agents import builtin_roles
from kernelswarm.cluster import SEED_LINEAGE, Swarm, SwarmSpec
from kernelswarm.search import (
    Budget,
    Candidate,
    CompileResult,
    Evaluation,
    Evaluator,
    KnobTuner,
    Lineage,
    LocalExecutor,
    Migration,
    Record,
    RunInfo,
    RunSummary,
    ShapeResult,
    Sink,
    Status,
    Tracker,
    load_task,
)
from tests.conftest import SILU_TASK

pytestmark = pytest.mark.slow

SEEDS = [0, 1]
BUDGET = Budget(candidates=8)
NO_MIGRATION = Migration(interval=1000)  # migrants arrive by timing on Ray; here they never do


class Scored(Evaluator):
    """Judges by what the source contains (no compiler): deterministic, with every path of the
    driver: a rewrite that breaks the build, one that is wrong, and knob settings 4 and 8 of
    the unroll knob that build to the same binary."""

    def compile(self, candidate: Candidate) -> CompileResult:
        if "#pragma GCC target" in candidate.source:
            return CompileResult(candidate.id, ok=False, seconds=0.0, log="error: target")
        return CompileResult(candidate.id, ok=True, seconds=0.0, binary=self._binary(candidate))

    @staticmethod
    def _binary(candidate: Candidate) -> str:
        knobs = {k: min(v, 4) if k == "KS_UNROLL" else v
                 for k, v in sorted(candidate.knob_values.items())}
        return hashlib.sha256((candidate.source + repr(knobs)).encode()).hexdigest()

    def evaluate(self, candidate: Candidate) -> Evaluation:
        if "#pragma GCC ivdep" in candidate.source:
            return Evaluation(candidate.id, Status.INCORRECT, "output differs", shapes=(
                ShapeResult("n=1", max_abs_err=1.0, correct=False),))
        speedup = 1.7 if "ks_fast_expf" in candidate.source else 1.0
        speedup *= 1.0 + min(candidate.knob_values.get("KS_UNROLL", 1), 4) / 100
        return Evaluation(candidate.id, Status.OK, eval_s=0.01,
                          binary=self._binary(candidate), shapes=(
            ShapeResult("n=1", correct=True, time_us=10.0 / speedup, speedup_vs_start=speedup,
                        roofline_fraction=0.1 * speedup),))


class LinesSink(Sink):
    """Writes (lineage, step, candidate id, status) of each record as a JSON line."""

    durable = True

    def __init__(self, path: Path) -> None:
        self.path = path

    def open(self, run: RunInfo) -> None:
        self.path.write_text("")

    def write(self, record: Record) -> None:
        with self.path.open("a") as out:
            out.write(json.dumps([record.lineage, record.step, record.candidate.id,
                                  record.evaluation.status.value]) + "\n")

    def close(self, summary: RunSummary) -> None:
        pass


def _by_lineage(path: Path) -> dict[int, list[tuple[int, str, str]]]:
    out: dict[int, list[tuple[int, str, str]]] = {}
    for line in path.read_text().splitlines():
        lineage, step, candidate_id, status = json.loads(line)
        out.setdefault(lineage, []).append((step, candidate_id, status))
    return out


def _run_info(tmp_path: Path) -> RunInfo:
    return RunInfo("adapters", "adapters", tmp_path, "silu_and_mul", "cpp", len(SEEDS))


def _local(start: Candidate, tmp_path: Path) -> tuple[Path, dict[int, str]]:
    """The search in one process, set up as ``Swarm`` and ``LineageActor`` set up theirs."""
    path = tmp_path / "local.jsonl"
    evaluator = Scored()
    tracker = Tracker(_run_info(tmp_path), [LinesSink(path)], migration=NO_MIGRATION)
    start_eval = evaluator.evaluate(start).as_own_start()  # 1.0 over itself, as Swarm records it
    tracker.record(SEED_LINEAGE, 0, start, start_eval)
    lineages = [Lineage(i, start.derive(lineage=i, origin=start.origin), start_eval,
                        builtin_roles(seed), KnobTuner(seed=seed, prefix=f"lineage{i}-"),
                        BUDGET) for i, seed in enumerate(SEEDS)]
    LocalExecutor(evaluator, tracker).run(lineages)
    return path, {lin.lineage: lin.stop_reason for lin in lineages}


def test_the_ray_adapters_give_the_records_the_local_executor_gives(tmp_path, ray_session):
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # actors need Scored
    start = load_task(SILU_TASK).starting_candidate("cpp")
    local_path, local_reasons = _local(start, tmp_path)

    ray_path = tmp_path / "ray.jsonl"
    spec = SwarmSpec(run=_run_info(tmp_path), sinks=[LinesSink(ray_path)], start=start,
                     make_evaluator=Scored, make_roles=builtin_roles, seeds=SEEDS,
                     budget=BUDGET, workers=1, worker_resources={"num_cpus": 0},
                     migration=NO_MIGRATION)
    swarm = Swarm(spec)
    swarm.start()
    assert swarm.done(timeout=240), "the lineages did not finish in time"
    result = swarm.finish()

    local, remote = _by_lineage(local_path), _by_lineage(ray_path)
    assert set(remote) == {SEED_LINEAGE, 0, 1}
    assert remote == local
    statuses = {status for steps in local.values() for _, _, status in steps}
    assert {"OK", "COMPILE_ERROR", "INCORRECT"} <= statuses  # every path was taken
    assert {r.lineage: r.stop_reason for r in result.lineages} == local_reasons
    assert all(not r.error for r in result.lineages)
