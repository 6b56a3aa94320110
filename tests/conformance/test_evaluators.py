"""One contract suite over every ``search.Evaluator`` in the tree, as test_sinks.py runs one over
every sink: the sandboxed judge (``SandboxEvaluator``), the cluster's ``DispatchedEvaluator``
(built here, judged by a worker of a real ``EvalPool`` on the test session's Ray instance), and
the benchmarks' stand-ins that judge nothing by design (``SimulatedEvaluator``,
``HeldEvaluator``).

The contract (search/evaluator.py, and what search/driver.py relies on): a kernel that builds
gets a ``CompileResult`` with a binary hash, the same for the same source and cached; a broken
source is a COMPILE_ERROR with the compiler's message and costs the driver no worker time;
``evaluate`` of a correct kernel is OK under the candidate's own id, with shapes, speedups and
the binary's hash; a wrong kernel is INCORRECT; ``close`` after use is safe, twice. The task is
the cheapest real one: silu_and_mul's cpp kernel on the CPU. Each implementation is made once
for the module; its sandbox (the costly part) starts on its first evaluation.

An evaluator joins by adding a ``Case`` to ``CASES``; ``test_every_evaluator_has_a_case`` fails
until it does.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pytest

from benchmarks.cluster_sim import SimulatedEvaluator, Simulation
from benchmarks.llm_scale import HeldEvaluator, Workers
from kernelswarm.cluster import DispatchedEvaluator, EvalPool
from kernelswarm.cluster.pool import Lane
from kernelswarm.evaluators import SandboxEvaluator
from kernelswarm.search import (
    Candidate,
    Driver,
    Evaluation,
    Evaluator,
    RunInfo,
    Screen,
    Status,
    Tracker,
    Via,
    load_task,
)
from tests.conftest import ROOT, SILU_TASK
from tests.evaluators.kernel_library import kernel_source, quick_settings

CELL = "conformance"
ANOTHER_FUNCTION = '\nextern "C" int ks_another(void) { return 1; }\n'  # other machine code


class Bench:
    """What the cases build their evaluators from: the session's compile cache, a folder, and
    one evaluation pool (a worker on the session's Ray instance), started on first use."""

    def __init__(self, cache: Path, folder: Path) -> None:
        # One seed and few repeats: the verdicts matter here, not the figures. A run limit far
        # above a call's time: the machine is shared, and a slow call is not under test.
        self.settings = quick_settings(cache, seeds=1, min_repeats=3, max_repeats=20,
                                       run_timeout_s=60.0)
        self.folder = folder
        self._pool: EvalPool | None = None
        self._lane: Lane | None = None

    def sandbox(self) -> SandboxEvaluator:
        return SandboxEvaluator(SILU_TASK, "cpp", self.settings)

    def lane(self) -> Lane:
        if self._lane is None:
            self._pool = EvalPool(1, {"num_cpus": 0})
            self._lane = self._pool.open(CELL, partial(SandboxEvaluator, SILU_TASK, "cpp",
                                                       self.settings))
        return self._lane

    def close(self) -> None:
        if self._pool is not None:
            self._pool.release(CELL)
            self._pool.close()


@dataclass(frozen=True)
class Case:
    """How the suite makes one implementation, and which parts of the contract it claims."""

    make: Callable[[Bench], Evaluator]
    judges: str = ""  # why it does not build and judge kernels ("": it does)
    binaries: bool = True  # it reports a binary hash ("" is "nothing built")
    ray: bool = False  # it needs the session's Ray instance


_STAND_IN = "a benchmark's stand-in that builds and runs nothing by design: every verdict is OK"

CASES = {
    "SandboxEvaluator": Case(Bench.sandbox),
    "DispatchedEvaluator": Case(lambda bench: DispatchedEvaluator(bench.sandbox(), bench.lane()),
                                ray=True),
    "SimulatedEvaluator": Case(
        lambda bench: SimulatedEvaluator(Simulation(bench.folder / "trace", service_s=0.01,
                                                    compile_s=0.0)),
        judges=f"{_STAND_IN} (benchmarks/cluster_sim.py)"),
    "HeldEvaluator": Case(lambda bench: HeldEvaluator(Workers(1, 0.01), seed=0),
                          judges=f"{_STAND_IN} (benchmarks/llm_scale.py)",
                          binaries=False),
}


def _evaluator_classes_in_the_tree() -> set[str]:
    """Names of the classes under the package folders and benchmarks/ that derive from
    ``Evaluator``, read from the source (so one in a module nothing here imports is found too)."""
    classes = []
    for layer in ("search", "agents", "evaluators", "cluster", "experiments", "benchmarks"):
        for path in (ROOT / layer).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef):
                    bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")
                             for b in node.bases}
                    classes.append((node.name, bases))
    found = {"Evaluator"}
    while more := {name for name, bases in classes if bases & found} - found:
        found |= more
    return found - {"Evaluator"}


def test_every_evaluator_has_a_case():
    assert _evaluator_classes_in_the_tree() == set(CASES), \
        "an Evaluator without a conformance case (or back)"


@dataclass
class Subject:
    """One implementation, made once for the module, and the kernels the suite gives it."""

    case: Case
    evaluator: Evaluator
    start: Candidate  # silu_and_mul's cpp starting kernel: builds, and is correct

    _start_verdict: Evaluation | None = field(default=None, repr=False)

    def variant(self, kernel: str) -> Candidate:
        """The starting kernel with a source from tests/evaluators/kernels/."""
        return self.start.derive(source=kernel_source(kernel))

    def judge_start(self) -> Evaluation:
        """The starting kernel's verdict, evaluated once (its sandbox, if any, starts then)."""
        if self._start_verdict is None:
            self._start_verdict = self.evaluator.evaluate(self.start)
        return self._start_verdict


@pytest.fixture(scope="module")
def bench(compile_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    made = Bench(compile_cache, tmp_path_factory.mktemp("evaluators"))
    yield made
    made.close()


@pytest.fixture(scope="module")
def made(bench: Bench) -> Iterator[dict[str, Subject]]:
    subjects: dict[str, Subject] = {}
    yield subjects
    for subject in subjects.values():
        subject.evaluator.close()


@pytest.fixture
def subject(request: pytest.FixtureRequest, bench: Bench, made: dict[str, Subject]) -> Subject:
    """The parametrized implementation, made on first use (with Ray started if it needs it)."""
    name = request.param
    case = CASES[name]
    if case.ray:
        request.getfixturevalue("ray_session")
    if name not in made:
        start = load_task(SILU_TASK).starting_candidate("cpp")
        made[name] = Subject(case, case.make(bench), start)
    return made[name]


def each_evaluator(test):
    return pytest.mark.parametrize("subject", list(CASES), indirect=True)(test)


def _judging(subject: Subject) -> None:
    if subject.case.judges:
        pytest.skip(subject.case.judges)


@each_evaluator
def test_a_kernel_that_builds_gets_a_binary_hash_stable_for_its_source(subject):
    first, again = (subject.evaluator.compile(subject.start) for _ in range(2))
    assert first.ok and again.ok, first.log
    assert first.candidate_id == subject.start.id
    if not subject.case.binaries:
        assert first.binary == ""  # nothing built: no verdict is reused for an identical one
        return
    assert first.binary and first.binary == again.binary
    other = subject.evaluator.compile(
        subject.start.derive(source=subject.start.source + ANOTHER_FUNCTION))
    assert other.ok, other.log
    assert other.binary and other.binary != first.binary
    if not subject.case.judges:
        assert again.cached  # built once: a later evaluate does not build again


@each_evaluator
def test_a_broken_source_is_a_compile_error_with_the_compilers_message_and_no_worker_time(
        subject, tmp_path):
    _judging(subject)
    broken = subject.variant("compile_error")  # calls fast_silu, which does not exist
    tracker = Tracker(RunInfo("broken", "conformance", tmp_path, "silu_and_mul", "cpp", 1), [])
    try:
        judged = Driver(tracker, subject.evaluator).judge(broken)
    finally:
        tracker.close("conformance done")
    assert (judged.via, judged.worker_s) == (Via.BUILD_FAILED, 0.0)
    for verdict in (judged.evaluation, subject.evaluator.evaluate(broken)):
        assert verdict.status is Status.COMPILE_ERROR, verdict.message
        assert verdict.candidate_id == broken.id
        assert "fast_silu" in verdict.message and "error" in verdict.message.lower()


@each_evaluator
def test_a_correct_kernel_is_ok_with_shapes_and_speedups_under_its_own_id(subject):
    evaluation = subject.judge_start()
    assert evaluation.status is Status.OK, evaluation.message
    assert evaluation.candidate_id == subject.start.id
    assert evaluation.shapes and all(s.correct and s.speedup_vs_start > 0
                                     for s in evaluation.shapes)
    assert evaluation.speedup > 0
    if not subject.case.judges:
        tuning = load_task(SILU_TASK).tuning_shapes
        assert [s.shape for s in evaluation.shapes] == [shape.label for shape in tuning]
        # the hash a tracker re-issues the verdict under for an identical build
        assert evaluation.binary == subject.evaluator.compile(subject.start).binary


@each_evaluator
def test_a_wrong_kernel_is_incorrect_not_ok(subject):
    _judging(subject)
    wrong = subject.variant("wrong_math")  # sigmoid instead of silu
    evaluation = subject.evaluator.evaluate(wrong)
    assert evaluation.status is Status.INCORRECT, evaluation.message
    assert evaluation.candidate_id == wrong.id
    assert "wrong result" in evaluation.message


@each_evaluator
def test_a_screen_stops_a_kernel_below_its_bar_and_lets_one_that_reaches_it_through(subject):
    """``evaluate_screened``: against a bar far above the kernel, SCREENED_OUT after its
    screening shape (timed there only, checked everywhere); against one far below, the verdict
    ``evaluate`` gives, every shape timed."""
    _judging(subject)
    labels = [s.shape for s in subject.judge_start().shapes]

    def screen(bar: float) -> Screen:
        return Screen((labels[1],), tuple((label, bar, math.nan) for label in labels))

    out = subject.evaluator.evaluate_screened(subject.start, screen(100.0))
    assert out.status is Status.SCREENED_OUT, out.message
    assert [s.shape for s in out.shapes if s.time_us > 0] == [labels[1]]
    assert all(s.correct for s in out.shapes) and out.speedup == 0.0
    through = subject.evaluator.evaluate_screened(subject.start, screen(0.01))
    assert through.status is Status.OK, through.message
    assert all(s.time_us > 0 for s in through.shapes) and through.speedup > 0


@each_evaluator
def test_close_after_use_is_safe_twice(subject, made):
    subject.judge_start()  # used: its sandbox, if it has one, is up
    # Closed, it leaves the module's subjects: a test run after this one makes a new one.
    made.pop(next(name for name, each in made.items() if each is subject))
    subject.evaluator.close()
    subject.evaluator.close()
