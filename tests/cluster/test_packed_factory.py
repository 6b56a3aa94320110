"""The dispatcher passes evaluator factories on without unpickling them: unpickling one imports
what its evaluator imports (torch and the task: seconds of CPU at every run's start)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import ray

from kernelswarm.cluster import EvalPool
from kernelswarm.cluster.packed import PackedFactory
from kernelswarm.search import Candidate, CompileResult, Evaluation, Evaluator, Status

pytestmark = pytest.mark.slow


def _noting(marks: Path):
    """An evaluator factory that leaves a file named after each process that unpickles it
    (defined inside a function, so Ray ships it by value to the actors)."""

    class Quick(Evaluator):
        def compile(self, candidate: Candidate) -> CompileResult:
            return CompileResult(candidate.id, ok=True, seconds=0.0)

        def evaluate(self, candidate: Candidate) -> Evaluation:
            return Evaluation(candidate.id, Status.OK, "")

    class Noting:
        def __init__(self, marks: Path) -> None:
            self.marks = marks

        def __reduce__(self) -> tuple:
            return unpickled, (self.marks,)

        def __call__(self) -> Evaluator:
            return Quick()

    def unpickled(marks: Path) -> Noting:
        (marks / str(os.getpid())).touch()
        return Noting(marks)

    return Noting(marks)


def test_a_packed_factory_keys_by_its_bytes_and_builds_what_it_packed(tmp_path):
    make = _noting(tmp_path)
    packed = PackedFactory.of(make)
    assert packed.key == PackedFactory.of(make).key
    assert packed.key != PackedFactory.of(type(make)(tmp_path / "other")).key
    start = Candidate.create(language="cpp", source="// start", entry="f")
    assert packed.unpack()().evaluate(start).ok


def test_only_the_worker_unpickles_a_cells_factory_not_the_dispatcher(tmp_path, ray_session):
    pool = EvalPool(1, {"num_cpus": 0})
    try:
        lane = pool.open("cell", _noting(tmp_path))
        candidate = Candidate.create(language="cpp", source="// one", entry="f")
        assert ray.get(lane.submit(candidate)).status is Status.OK
        dispatcher = ray.get(pool.dispatcher.__ray_call__.remote(lambda _: os.getpid()))
        worker = ray.get(pool.workers[0].pid.remote())
        unpickled_in = {int(mark.name) for mark in tmp_path.iterdir()}
        assert worker in unpickled_in  # it built its evaluator from the factory
        assert dispatcher not in unpickled_in
        assert os.getpid() not in unpickled_in
    finally:
        pool.close()


@ray.remote
def _niceness() -> int:
    return os.getpriority(os.PRIO_PROCESS, 0)


def test_a_local_ray_instance_runs_its_workers_at_the_drivers_priority(ray_session):
    """Ray's default (15) put every timed call below any other process on the machine."""
    assert ray.get(_niceness.remote()) == os.getpriority(os.PRIO_PROCESS, 0)


def _priority_noting(marks: Path):
    """Roles and compiler factories that note the niceness of the process unpickling them."""

    def unpickled(marks: Path):
        (marks / f"{os.getpid()}-{os.getpriority(os.PRIO_PROCESS, 0)}").touch()
        return lambda *args: None

    class Noting:
        def __reduce__(self) -> tuple:
            return unpickled, (marks,)

    return Noting()


def test_a_lineage_unpickles_its_roles_and_compiler_once_its_priority_is_lowered(tmp_path,
                                                                               ray_session):
    from kernelswarm.cluster.lineage_actor import LINEAGE_NICENESS, LineageActor

    start = Candidate.create(language="cpp", source="// start", entry="f")
    make = _priority_noting(tmp_path)
    actor = LineageActor.remote(0, 0, start, PackedFactory.of(make), PackedFactory.of(make),
                                None, None, None)
    try:
        ray.get(actor.__ray_ready__.remote())
        niceness = {int(mark.name.split("-")[1]) for mark in tmp_path.iterdir()}
        worker = ray.get(_niceness.remote())  # an actor's process that lowers nothing
        assert niceness == {min(19, worker + LINEAGE_NICENESS)}
    finally:
        ray.kill(actor)
