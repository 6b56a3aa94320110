"""One contract suite over every tracker port (``search.TrackerPort``), as test_sinks.py runs one
over every sink: the in-process ``search.Tracker`` under every search strategy
(search/strategies/), and the Ray ``TrackerActor`` through ``cluster.ports.ActorTracker``,
blocking and pipelined (how a lineage actor talks to it), under the default strategy.

The contract (search/driver.py): a claim is granted once and other claimants are told to wait;
a recorded verdict comes back from ``claim`` and ``lookup``; ``release`` lets another claim; a
verdict found by ``lookup_binary`` is re-issued under the asker's id, never to the candidate it
came from; records from several drivers get one total order and are in the durable sink
(Parquet) when ``record`` returns (pipelined: when ``settle`` returns); migrants come on
migration steps only and are never the lineage's own kernels; with novelty rejection on,
``novel`` refuses a coder's candidate too close to a judged kernel, naming it. The suite uses
the port's methods only, never the archive or strategy behind them.

A tracker port joins by adding a ``Backend``; ``test_every_tracker_port_has_a_backend`` fails
until it does. A strategy joins by itself (one backend per ``STRATEGIES`` entry).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import ray

from kernelswarm.cluster import ActorTracker, TrackerActor
from kernelswarm.experiments.sinks import ParquetSink, read_evaluations
from kernelswarm.search import (
    STRATEGIES,
    Candidate,
    Evaluation,
    Migration,
    Origin,
    Population,
    RunInfo,
    ShapeResult,
    Status,
    Tracker,
    TrackerPort,
    load_task,
)
from tests.conftest import ROOT, SILU_TASK

# Migrants every 2 steps, more of them than other lineages have kernels: the lineage's own
# kernels are among the elites (the islands' ``all``), so a tracker handing them back is caught.
MIGRATION = Migration(interval=2, count=4, topology="all")
NOVELTY = 0.95  # the similarity at which a coder's candidate is not judged
POPULATION = Population(migration=MIGRATION, novelty=NOVELTY)  # under the default strategy


@dataclass
class Opened:
    """One tracker under test: a port per lineage, and how to settle and close them."""

    port: Callable[[int], TrackerPort]
    settle: Callable[[TrackerPort], None]  # returns once the port's records are durable
    close: Callable[[], None]


def _local(strategy: str) -> Callable[[RunInfo], Opened]:
    def open_local(run: RunInfo) -> Opened:
        # One object serves every driver of the process: each lineage's port is the tracker.
        tracker = Tracker(run, [ParquetSink()], population=replace(POPULATION, strategy=strategy))
        return Opened(lambda lineage: tracker, lambda port: None,
                      lambda: tracker.close("conformance done"))

    return open_local


def _actor(pipelined: bool) -> Callable[[RunInfo], Opened]:
    """A TrackerActor with one ``ActorTracker`` per lineage, made as a lineage actor makes it
    (cluster/lineage_actor.py: its owner, the migration and novelty settings the actor
    tells)."""

    def open_actor(run: RunInfo) -> Opened:
        handle = TrackerActor.remote(run, [ParquetSink()], 8, population=POPULATION)
        population = ray.get(handle.population.remote())
        ports: dict[int, ActorTracker] = {}

        def port(lineage: int) -> ActorTracker:
            if lineage not in ports:
                ports[lineage] = ActorTracker(handle, owner=lineage,
                                              migration=population.migration,
                                              novelty=population.novelty > 0,
                                              pipelined=pipelined)
            return ports[lineage]

        def close() -> None:
            for each in ports.values():
                each.settle()
            ray.get(handle.close.remote("conformance done"))
            ray.kill(handle)

        return Opened(port, lambda p: p.settle(), close)

    return open_actor


@dataclass(frozen=True)
class Backend:
    name: str
    open: Callable[[RunInfo], Opened]
    covers: frozenset[str]  # the classes of the tree it exercises
    ray: bool = False


BACKENDS = {b.name: b for b in (
    *(Backend(f"tracker-{strategy}", _local(strategy), frozenset({"Tracker"}))
      for strategy in STRATEGIES),
    Backend("actor", _actor(pipelined=False), frozenset({"ActorTracker", "TrackerActor"}),
            ray=True),
    Backend("actor-pipelined", _actor(pipelined=True),
            frozenset({"ActorTracker", "TrackerActor"}), ray=True),
)}


def _port_classes_in_the_tree() -> set[str]:
    """Classes under the package folders that serve the port's calls (``claim`` and
    ``migrants`` and ``novel``), read from the source; the Protocol itself left out."""
    needed = {"claim", "migrants", "novel"}
    found = set()
    for layer in ("search", "agents", "evaluators", "cluster", "experiments"):
        for path in (ROOT / layer).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef):
                    methods = {n.name for n in node.body
                               if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
                    if needed <= methods:
                        found.add(node.name)
    return found - {"TrackerPort"}


def test_every_tracker_port_has_a_backend():
    covered = set().union(*(b.covers for b in BACKENDS.values()))
    assert _port_classes_in_the_tree() == covered, \
        "a tracker port without a conformance backend (or back)"


@pytest.fixture
def tracker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opened]:
    """The parametrized backend's tracker on a fresh run folder (a Parquet sink in it)."""
    backend = request.param
    if backend.ray:
        request.getfixturevalue("ray_session")
    opened = backend.open(RunInfo(tmp_path.name, "conformance", tmp_path, "silu_and_mul",
                                  "cpp", 3))
    yield opened
    opened.close()


def each_backend(test):
    return pytest.mark.parametrize("tracker", BACKENDS.values(), ids=list(BACKENDS),
                                   indirect=True)(test)


@pytest.fixture(scope="module")
def kernels() -> Callable[[int, str], Candidate]:
    """``kernels(lineage, label)``: a cpp candidate of the real task, distinct per label."""
    start = load_task(SILU_TASK).starting_candidate("cpp")

    def make(lineage: int, label: str) -> Candidate:
        return start.derive(source=start.source + f"\n// {label}\n", lineage=lineage,
                            origin=Origin(role="coder", move=f"rewrite:{label}"))

    return make


def _ok(candidate: Candidate, speedup: float = 1.25, binary: str = "",
        shape: str = "n=1") -> Evaluation:
    return Evaluation(candidate.id, Status.OK, "correct", eval_s=0.1, device="cpu: test",
                      shapes=(ShapeResult(shape, correct=True, time_us=10.0 / speedup,
                                          start_time_us=10.0, speedup_vs_start=speedup),),
                      # the field, and the key the archive reads until it switches to it
                      binary=binary, resources={"binary": binary} if binary else {})


def _reused_from(evaluation: Evaluation) -> str:
    """The candidate whose verdict this is: ``Evaluation.reused_from``, or the metrics key the
    tracker sets until it switches to that field (search/stored_form.py)."""
    return evaluation.reused_from or str(evaluation.metrics.get("reused_from", ""))


def _recorded(run_dir: Path) -> list[dict]:
    """The durable sink's rows, one per record (every verdict here has one shape)."""
    return read_evaluations(run_dir).to_pylist()


@each_backend
def test_a_claim_is_granted_once_and_the_others_wait_until_it_is_released(tracker, kernels):
    wanted = kernels(0, "wanted by three")
    ports = [tracker.port(lineage) for lineage in range(3)]
    with ThreadPoolExecutor(max_workers=3) as pool:
        answers = list(pool.map(lambda port: port.claim(wanted.id), ports))
    assert sorted(answers, key=lambda a: a[1]) == [(None, False), (None, False), (None, True)]
    assert ports[0].lookup(wanted.id) is None  # nothing recorded: waiting, not a verdict
    winner = answers.index((None, True))
    ports[winner].release(wanted.id)
    other = ports[(winner + 1) % len(ports)]
    assert other.claim(wanted.id) == (None, True)


@each_backend
def test_a_recorded_verdict_is_returned_by_claim_and_lookup(tracker, kernels):
    done = kernels(0, "recorded")
    verdict = Evaluation(done.id, Status.INCORRECT, "output 0 differs at [0, 0]", eval_s=0.2)
    mine, other = tracker.port(0), tracker.port(1)
    assert mine.claim(done.id) == (None, True)
    mine.record(0, 1, done, verdict)
    tracker.settle(mine)
    assert other.claim(done.id) == (verdict, False)
    assert other.lookup(done.id) == verdict
    assert mine.claim(done.id) == (verdict, False)  # its own claimant too: it is judged


@each_backend
def test_a_verdict_on_the_same_binary_is_reissued_under_the_askers_id(tracker, kernels):
    first, twin = kernels(0, "first build"), kernels(1, "same machine code")
    verdict = _ok(first, 1.6, binary="b-shared")
    port = tracker.port(0)
    port.claim(first.id)
    port.record(0, 1, first, verdict)
    tracker.settle(port)
    asker = tracker.port(1)
    reissued = asker.lookup_binary(twin.id, "b-shared")
    assert reissued is not None
    assert reissued.candidate_id == twin.id
    assert _reused_from(reissued) == first.id
    assert (reissued.status, reissued.speedup) == (verdict.status, verdict.speedup)
    assert reissued.eval_s == 0.0  # no worker time spent on the twin
    assert asker.lookup_binary(first.id, "b-shared") is None  # not its own verdict back
    assert asker.lookup_binary(twin.id, "b-other") is None
    assert asker.lookup_binary(twin.id, "") is None  # "" means nothing was built


@each_backend
def test_records_get_one_total_order_and_are_durable_when_record_returns(
        tracker, kernels, tmp_path):
    steps = 4

    def drive(lineage: int) -> list[str]:
        port, ids = tracker.port(lineage), []
        for step in range(1, steps + 1):
            candidate = kernels(lineage, f"lineage {lineage} step {step}")
            known, mine = port.claim(candidate.id)
            assert (known, mine) == (None, True)
            port.record(lineage, step, candidate, _ok(candidate, 1.0 + step / 10))
            tracker.settle(port)
            durable = {row["candidate_id"] for row in _recorded(tmp_path)}
            assert candidate.id in durable, f"lineage {lineage} step {step} not durable"
            ids.append(candidate.id)
        return ids

    with ThreadPoolExecutor(max_workers=2) as pool:  # two drivers at once
        written = list(pool.map(drive, (0, 1)))
    rows = _recorded(tmp_path)
    assert [row["seq"] for row in rows] == list(range(2 * steps))
    for lineage, ids in enumerate(written):
        mine = [row for row in rows if row["lineage"] == lineage]
        assert [row["candidate_id"] for row in mine] == ids
        assert [row["step"] for row in mine] == list(range(1, steps + 1))


@each_backend
def test_migrants_come_on_migration_steps_and_never_the_lineages_own(tracker, kernels):
    own = [kernels(0, "own fast"), kernels(0, "own faster")]
    theirs = [kernels(1, "theirs slower"), kernels(1, "theirs slowest")]
    # The lineage's own kernels are the run's best: the first a careless tracker would offer.
    # Each wins on a shape of its own, so a population that keeps one kernel per behaviour
    # (MAP-Elites) keeps all four.
    shapes = iter(f"n={i}" for i in range(4))
    for lineage, made, speedups in ((0, own, (3.0, 3.5)), (1, theirs, (1.5, 1.2))):
        port = tracker.port(lineage)
        for step, (candidate, speedup) in enumerate(zip(made, speedups, strict=True), 1):
            port.claim(candidate.id)
            port.record(lineage, step, candidate, _ok(candidate, speedup, shape=next(shapes)))
        tracker.settle(port)
    asking = tracker.port(0)
    assert [asking.migrants(0, step) for step in (0, 1, 3)] == [[], [], []]
    arrived = asking.migrants(0, MIGRATION.interval)
    assert arrived, "nothing migrated on a migration step"
    assert {c.id for c, _ in arrived} <= {c.id for c in theirs}
    assert all(e.candidate_id == c.id and e.ok for c, e in arrived)


@each_backend
def test_a_coders_candidate_too_close_to_a_judged_kernel_is_not_judged(tracker, kernels):
    judged = kernels(0, "judged")
    port = tracker.port(0)
    port.claim(judged.id)
    port.record(0, 1, judged, _ok(judged))
    tracker.settle(port)
    asking = tracker.port(1)
    # A comment apart: the same token stream, what a compiler sees.
    near = kernels(1, "the same kernel, another comment")
    rejection = asking.novel(near)
    assert rejection is not None, "a copy of a judged kernel was let through"
    assert (rejection.candidate_id, rejection.near) == (near.id, judged.id)
    assert rejection.similarity >= NOVELTY
    far = near.derive(source='extern "C" void silu_and_mul(float* out, const float* x, '
                             'long n) { for (long i = 0; i < n; ++i) out[i] = x[i] * 2; }\n')
    assert asking.novel(far) is None
