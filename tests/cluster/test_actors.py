"""The cluster layer on a real local Ray instance: tracker actor, dispatcher, dead workers."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest
import ray

from kernelswarm.cluster import EvalDispatcher, EvalWorker, TrackerActor
from kernelswarm.cluster.packed import PackedFactory
from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator
from kernelswarm.search import (
    Candidate,
    CompileResult,
    Evaluation,
    Evaluator,
    RunInfo,
    Status,
    load_task,
)
from tests.conftest import SILU_TASK

pytestmark = pytest.mark.slow


def _settings(cache) -> EvaluatorSettings:
    return EvaluatorSettings(cache_dir=cache, timing_budget_s=0.05, min_repeats=3,
                             flush_cache=False)


def test_tracker_actor_orders_records_and_serves_claims(tmp_path, ray_session):
    run = RunInfo("r", "t", tmp_path, "silu_and_mul", "cpp", 2)
    tracker = TrackerActor.remote(run, [], 4)
    candidates = [Candidate.create(language="cpp", source=f"// {i}", entry="f", lineage=i % 2)
                  for i in range(6)]
    seqs = ray.get([tracker.record.remote(c.lineage, i, c, Evaluation(c.id, Status.INCORRECT, "x"))
                    for i, c in enumerate(candidates)])
    assert sorted(seqs) == list(range(6))
    assert ray.get(tracker.claim.remote(candidates[0].id))[0].status is Status.INCORRECT
    fresh = Candidate.create(language="cpp", source="// new", entry="f")
    assert ray.get(tracker.claim.remote(fresh.id)) == (None, True)
    assert ray.get(tracker.claim.remote(fresh.id)) == (None, False)
    stats = ray.get(tracker.stats.remote())
    assert stats["records"] == 6 and stats["status"] == {"INCORRECT": 6}
    summary, errors, _ = ray.get(tracker.close.remote("done"))
    assert summary.records == 6 and errors == []
    ray.kill(tracker)


def _until(predicate, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)


@pytest.fixture
def pool(tmp_path, ray_session):
    """A dispatcher with one worker and a cell of silu_and_mul in C++, whose evaluator
    calibrates in a cache of its own (seconds: the preparation is surely in flight a while);
    closed and killed after the test."""
    make = partial(SandboxEvaluator, SILU_TASK, "cpp", _settings(tmp_path))
    worker = EvalWorker.options(num_cpus=0).remote()
    dispatcher = EvalDispatcher.remote([worker])
    try:
        ray.get(worker.__ray_ready__.remote())
        ray.get(dispatcher.open_cell.remote("run", PackedFactory.of(make)))  # the worker prepares
        yield worker, dispatcher
        ray.get(dispatcher.close.remote())
    finally:
        ray.kill(dispatcher)
        ray.kill(worker, no_restart=True)


def _utilisation(dispatcher) -> dict[str, float]:
    return ray.get(dispatcher.utilisation.remote("run"))


def test_a_worker_killed_mid_evaluation_is_replaced_and_the_candidate_retried(pool):
    worker, dispatcher = pool
    _until(lambda: _utilisation(dispatcher)["preparing"] == 0, "the worker is ready")
    start = load_task(SILU_TASK).starting_candidate("cpp")
    # not the calibrated start: the evaluation compiles it first (seconds)
    fresh = replace(start, source=start.source + "\n// another build\n")
    pending = dispatcher.evaluate.remote("run", fresh)
    _until(lambda: _utilisation(dispatcher)["cell_holding"] == 1, "the worker holds it")
    ray.kill(worker, no_restart=False)
    verdict = ray.get(pending, timeout=180)
    assert verdict.status is Status.OK, verdict.message
    assert _utilisation(dispatcher)["worker_deaths"] == 1


def test_a_worker_killed_while_preparing_is_a_death_and_judges_after_its_restart(pool):
    worker, dispatcher = pool
    _until(lambda: _utilisation(dispatcher)["preparing"] == 1, "the worker prepares")
    ray.kill(worker, no_restart=False)
    _until(lambda: _utilisation(dispatcher)["preparing"] == 0, "the preparation ended")
    assert _utilisation(dispatcher)["worker_deaths"] == 1
    intervals = ray.get(dispatcher.activity.remote())["intervals"]
    assert [i["outcome"] for i in intervals if i["kind"] == "prepare"] == ["worker died"]
    start = load_task(SILU_TASK).starting_candidate("cpp")
    verdict = ray.get(dispatcher.evaluate.remote("run", start), timeout=180)
    assert verdict.status is Status.OK, verdict.message
    assert _utilisation(dispatcher)["worker_deaths"] == 1


def _failing_factory(marker: Path, exits: bool):
    """A factory of evaluators whose first evaluation (the marker file remembers it) raises, as
    a sandbox killed under it would; with ``exits`` the worker's process ends just after, as a
    worker does when Ray kills it (its children first, so its evaluation can still answer).
    Defined inside a function, so Ray ships it by value to the workers."""

    class FailsOnce(Evaluator):
        def compile(self, candidate: Candidate) -> CompileResult:
            return CompileResult(candidate.id, ok=True, seconds=0.0)

        def evaluate(self, candidate: Candidate) -> Evaluation:
            if not marker.exists():
                marker.write_text("failed")
                if exits:
                    threading.Timer(0.2, os._exit, (1,)).start()
                raise RuntimeError("the runner died (this test's fault)")
            return Evaluation(candidate.id, Status.OK, metrics={"pid": os.getpid()})

    def make() -> Evaluator:
        return FailsOnce()

    return make


def _killed_sandbox_factory(marker: Path, exits: bool):
    """As ``_failing_factory``, but the first evaluation answers as a judge whose sandbox was
    killed under it does: a RUNTIME_ERROR verdict, its runner lost to SIGKILL."""

    class SandboxKilledOnce(Evaluator):
        def compile(self, candidate: Candidate) -> CompileResult:
            return CompileResult(candidate.id, ok=True, seconds=0.0)

        def evaluate(self, candidate: Candidate) -> Evaluation:
            if not marker.exists():
                marker.write_text("killed")
                if exits:
                    threading.Timer(0.2, os._exit, (1,)).start()
                return Evaluation(candidate.id, Status.RUNTIME_ERROR, "killed (SIGKILL)",
                                  metrics={"runner_signal": 9})
            return Evaluation(candidate.id, Status.OK, metrics={"pid": os.getpid()})

    def make() -> Evaluator:
        return SandboxKilledOnce()

    return make


@pytest.mark.parametrize("exits", [True, False], ids=["worker-went-down", "worker-lives"])
def test_a_sandbox_killed_with_its_worker_is_judged_again_but_a_lone_kill_is_a_verdict(
        tmp_path, ray_session, exits):
    """A worker shutting down kills its children first, so its evaluation may still answer with
    its sandbox's death: that verdict is the worker's, not the candidate's."""
    worker = EvalWorker.options(num_cpus=0).remote()
    dispatcher = EvalDispatcher.remote([worker])
    first_pid = ray.get(worker.pid.remote())
    ray.get(dispatcher.open_cell.remote(
        "run", PackedFactory.of(_killed_sandbox_factory(tmp_path / "marker", exits))))
    candidate = Candidate.create(language="cpp", source="// killed once", entry="f")
    try:
        verdict = ray.get(dispatcher.evaluate.remote("run", candidate), timeout=120)
        deaths = ray.get(dispatcher.utilisation.remote())["worker_deaths"]
        if exits:
            assert verdict.status is Status.OK, verdict.message
            assert verdict.metrics["pid"] != first_pid and deaths == 1
        else:
            assert verdict.status is Status.RUNTIME_ERROR and "SIGKILL" in verdict.message
            assert deaths == 0 and ray.get(worker.pid.remote()) == first_pid
    finally:
        ray.kill(dispatcher)
        ray.kill(worker, no_restart=True)


@pytest.mark.parametrize("exits", [True, False], ids=["worker-went-down", "worker-lives"])
def test_an_evaluation_that_raises_is_retried_only_if_its_worker_went_down(
        tmp_path, ray_session, exits):
    worker = EvalWorker.options(num_cpus=0).remote()
    dispatcher = EvalDispatcher.remote([worker])
    first_pid = ray.get(worker.pid.remote())
    ray.get(dispatcher.open_cell.remote(
        "run", PackedFactory.of(_failing_factory(tmp_path / "marker", exits))))
    candidate = Candidate.create(language="cpp", source="// fails once", entry="f")
    try:
        if exits:
            verdict = ray.get(dispatcher.evaluate.remote("run", candidate), timeout=120)
            assert verdict.status is Status.OK, verdict.message
            assert verdict.metrics["pid"] != first_pid  # judged again by the restarted worker
            assert ray.get(dispatcher.utilisation.remote())["worker_deaths"] == 1
        else:
            with pytest.raises(RuntimeError, match="the runner died"):
                ray.get(dispatcher.evaluate.remote("run", candidate), timeout=120)
            assert ray.get(dispatcher.utilisation.remote())["worker_deaths"] == 0
            assert ray.get(worker.pid.remote()) == first_pid
    finally:
        ray.kill(dispatcher)
        ray.kill(worker, no_restart=True)
