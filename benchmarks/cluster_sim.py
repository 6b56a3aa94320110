"""A SIMULATION of evaluation, for measuring orchestration only: no kernel is built or run.

``SimulatedEvaluator`` sleeps a fixed service time where a real evaluator would compile and time
a kernel, and returns an OK verdict whose speedup is made up from the candidate's id; the
"compile" is a shorter fixed sleep. The simulated roles (planner, coder, analyst) propose a new
variant every step without thinking. Together they let the real tracker, dispatcher and lineage
actors (``kernelswarm.cluster.Swarm``) run at full speed, so that what is measured is what the
orchestration costs. Every verdict says it is simulated (``device`` and ``message``). Nothing
here is reachable from a run configuration: ``kernelswarm run`` only builds the sandbox
evaluator.

Each simulated piece appends what it did, with wall-clock times, to a JSON-lines trace in a
folder (one file per process). The benchmark reads the traces back: the evaluations the
simulated workers executed (to count against Parquet) and, per candidate, where its time went.
All processes run on one machine, so their ``time.time()`` clocks agree.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kernelswarm.search import (
    Analyst,
    Candidate,
    Coder,
    CompileResult,
    Evaluation,
    Evaluator,
    Facts,
    Feedback,
    LineageView,
    Origin,
    Plan,
    Planner,
    Roles,
    ShapeResult,
    Status,
)

SIMULATED_DEVICE = "simulated-gpu"
SIMULATED_MOVE = "simulated:variant"
SIMULATED_MESSAGE = ("simulated evaluation (orchestration benchmark): no kernel was built or "
                     "run, the speedup is made up")
# Events of the trace, in the order a candidate meets them.
PLANNED, CODED, COMPILED, SERVED, ANALYSED = "planned", "coded", "compiled", "served", "analysed"


@dataclass(frozen=True)
class Simulation:
    """What the simulated pieces do: how long they sleep, and where they write their trace."""

    trace_dir: Path
    service_s: float = 0.5  # one simulated GPU busy per evaluation
    compile_s: float = 0.02  # simulated compile, on the lineage's CPU (sleeps, uses none)


def simulated_start() -> Candidate:
    """The kernel a simulated run starts from: a placeholder source, never compiled."""
    return Candidate.create(language="cpp", entry="simulated_kernel",
                            source="// simulated kernel: the orchestration benchmark never "
                                   "compiles or runs it\n")


class Trace:
    """This process's trace file in ``folder``: one JSON list per event, flushed as written (an
    actor may be killed at the end of a run; what it wrote is kept)."""

    def __init__(self, folder: Path, kind: str) -> None:
        self._path = folder / f"{kind}-{os.getpid()}-{id(self):x}.jsonl"
        self._file: IO[str] | None = None

    def write(self, *event: Any) -> None:
        if self._file is None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self._path, "a", buffering=1)  # noqa: SIM115 - lives with self
        self._file.write(json.dumps(event) + "\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_trace(folder: Path) -> Iterator[list[Any]]:
    """Every event written under ``folder`` (files in no particular order)."""
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                yield json.loads(line)


def made_up_speedup(candidate_id: str) -> float:
    """A speedup between 0.8 and 1.3 derived from the id, so every run gets the same ones."""
    return 0.8 + (int(candidate_id[:8], 16) % 1000) / 1000 * 0.5


def simulated_verdict(candidate: Candidate, simulation: Simulation) -> Evaluation:
    """The OK verdict a simulated worker returns, marked as simulated."""
    speedup = made_up_speedup(candidate.id)
    shape = ShapeResult("simulated", correct=True, max_abs_err=0.0, max_rel_err=0.0,
                        time_us=100.0 / speedup, samples=1, start_time_us=100.0,
                        speedup_vs_start=speedup)
    return Evaluation(candidate.id, Status.OK, SIMULATED_MESSAGE, shapes=(shape,),
                      compile_s=simulation.compile_s, eval_s=simulation.service_s,
                      device=SIMULATED_DEVICE)


class SimulatedEvaluator(Evaluator):
    """Sleeps instead of judging (see the module docstring); each built "binary" is unique, so
    no verdict is reused and every candidate reaches a worker."""

    def __init__(self, simulation: Simulation) -> None:
        self.simulation = simulation
        self._trace = Trace(simulation.trace_dir, "evaluator")

    def compile(self, candidate: Candidate) -> CompileResult:
        began = time.time()
        time.sleep(self.simulation.compile_s)
        self._trace.write(COMPILED, candidate.id, began, time.time())
        return CompileResult(candidate.id, ok=True, seconds=self.simulation.compile_s,
                             binary=f"simulated-{candidate.id}")

    def evaluate(self, candidate: Candidate) -> Evaluation:
        began = time.time()
        time.sleep(self.simulation.service_s)
        self._trace.write(SERVED, candidate.id, began, time.time())
        return simulated_verdict(candidate, self.simulation)

    def close(self) -> None:
        self._trace.close()


@dataclass
class SimulatedPlanner(Planner):
    """Always asks for another variant."""

    trace: Trace

    def plan(self, view: LineageView) -> Plan:
        self.trace.write(PLANNED, view.lineage, view.step, time.time())
        return Plan(SIMULATED_MOVE, "orchestration benchmark: a new variant every step")


@dataclass
class SimulatedCoder(Coder):
    """A new candidate per step: the current kernel with a comment naming lineage and step."""

    trace: Trace
    made: int = field(default=0)

    def code(self, plan: Plan, parent: Candidate, view: LineageView) -> Candidate | None:
        self.made += 1
        child = parent.derive(
            source=parent.source + f"// simulated variant {view.lineage}.{self.made}\n",
            origin=Origin(role="coder", move=plan.move, rationale=plan.rationale,
                          model="simulated"))
        self.trace.write(CODED, child.id, view.lineage, view.step, time.time())
        return child


@dataclass
class SimulatedAnalyst(Analyst):
    """Passes the verdict's figures on without judging them."""

    trace: Trace

    def analyse(self, candidate: Candidate, evaluation: Evaluation) -> Feedback:
        self.trace.write(ANALYSED, candidate.id, time.time())
        return Feedback("simulated", Facts(candidate_id=candidate.id, move=candidate.origin.move,
                                           status=evaluation.status,
                                           speedup=evaluation.speedup))


def simulated_roles(simulation: Simulation, seed: int) -> Roles:
    """A lineage's simulated roles (``SwarmSpec.make_roles``); they share one trace file."""
    trace = Trace(simulation.trace_dir, "roles")
    return Roles(SimulatedPlanner(trace), SimulatedCoder(trace), SimulatedAnalyst(trace))
