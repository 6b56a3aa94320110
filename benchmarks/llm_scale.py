"""How many LLM lineages keep a GPU busy: ``python -m benchmarks.llm_scale``.

Lineages are real ``search.Lineage`` state machines with the real LLM roles, talking over HTTP
through the openai package to a ``LoopbackServer`` that answers every call after sleeping a
uniform 5-20 s (the latency of a large model writing a kernel). Each candidate then occupies one
of ``--gpus`` evaluation workers exclusively for ``--eval-s`` seconds: by default the time one
real sandbox evaluation of silu_and_mul's cpp starting kernel takes on this machine (measured at
start, with the default timing settings); on a GPU machine, pass the evaluation time you see
there. The workers hold a lock for that long and return a made-up verdict: this measures how
busy the workers are kept, not kernels. Each lineage is run by the search's ``Driver`` (claims,
migration and records through an in-process ``Tracker``), as a lineage of a real run is.

For each number of lineages per worker it prints: worker busy fraction, GPU-idle fraction, and
candidates evaluated per minute. ``--time-scale`` multiplies every latency and hold (0.05 runs the
default 10-minute window in 30 s); fractions are unchanged by it, rates are reported unscaled.
"""

from __future__ import annotations

import argparse
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kernelswarm.agents.llm import (
    ROLE_NAMES,
    LLMSettings,
    LoopbackServer,
    Received,
    Reply,
    RoleModel,
    llm_roles,
)
from kernelswarm.search import (
    Budget,
    Candidate,
    CompileResult,
    Driver,
    Evaluation,
    Evaluator,
    KnobTuner,
    Lineage,
    RunInfo,
    ShapeResult,
    Status,
    Tracker,
    load_task,
)

TASK = Path(__file__).resolve().parents[1] / "experiments" / "tasks" / "silu_and_mul"
BUSY_TARGET = 0.8


class ScriptedModel:
    """Answers like a model that always proposes a new, valid kernel, after a random delay."""

    def __init__(self, start: Candidate, low_s: float, high_s: float, seed: int = 0) -> None:
        self.start, self.low_s, self.high_s = start, low_s, high_s
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._count = 0

    def __call__(self, received: Received) -> Reply:
        with self._lock:
            delay = self._rng.uniform(self.low_s, self.high_s)
            self._count += 1
            n = self._count
        if received.request == "planner":
            text = '```json\n{"move": "llm:variant", "rationale": "try another variant"}\n```'
        elif received.request == "analyst":
            text = ('```json\n{"summary": "memory-bound", "bottleneck": "memory", '
                    '"suggestion": "vectorise"}\n```')
        else:
            text = (f"```cpp\n{self.start.source}// variant {n}\n```\n"
                    '```json\n{"knobs": {}, "summary": "a variant"}\n```')
        return Reply(text, delay_s=delay, prompt_tokens=3000, completion_tokens=600)


class Workers:
    """``count`` evaluation workers, each held exclusively for ``hold_s`` per candidate."""

    def __init__(self, count: int, hold_s: float) -> None:
        self.hold_s = hold_s
        self._free = threading.Semaphore(count)
        self._lock = threading.Lock()
        self.intervals: list[tuple[float, float]] = []

    def evaluate(self, candidate: Candidate, rng: random.Random) -> Evaluation:
        with self._free:
            began = time.monotonic()
            time.sleep(self.hold_s)
            ended = time.monotonic()
        with self._lock:
            self.intervals.append((began, ended))
        speedup = rng.uniform(0.8, 1.3)
        return Evaluation(candidate.id, Status.OK, shapes=(
            ShapeResult("n=1", correct=True, time_us=10.0 / speedup, speedup_vs_start=speedup),))

    def busy_s(self, start: float, end: float) -> float:
        with self._lock:
            return sum(max(0.0, min(b, end) - max(a, start)) for a, b in self.intervals)


class HeldEvaluator(Evaluator):
    """One lineage's evaluator: nothing to build; each evaluation holds one of ``workers``."""

    def __init__(self, workers: Workers, seed: int) -> None:
        self._workers = workers
        self._rng = random.Random(seed)

    def compile(self, candidate: Candidate) -> CompileResult:
        return CompileResult(candidate.id, ok=True, seconds=0.0)

    def evaluate(self, candidate: Candidate) -> Evaluation:
        return self._workers.evaluate(candidate, self._rng)


@dataclass(frozen=True)
class Row:
    lineages_per_gpu: int
    busy: float
    candidates_per_min: float
    llm_calls: int


def measure_eval_s() -> float:
    """Seconds of one real sandbox evaluation of the cpp starting kernel (sandbox already up)."""
    from kernelswarm.evaluators import SandboxEvaluator

    with SandboxEvaluator(TASK, "cpp") as evaluator:
        start = evaluator.start_candidate
        evaluator.evaluate(start)  # starts the sandbox
        variant = start.derive(source=start.source + "// timed\n")
        return evaluator.evaluate(variant).eval_s


def _drive(make_lineage: Callable[[], Lineage], tracker: Tracker, workers: Workers,
           seed: int) -> None:
    lineage = make_lineage()  # in the thread: its first analysis is a model call too
    Driver(tracker, HeldEvaluator(workers, seed)).run(lineage)


def run_config(per_gpu: int, gpus: int, eval_s: float, llm_s: tuple[float, float],
               window_s: float, scale: float) -> Row:
    task = load_task(TASK)
    start = task.starting_candidate("cpp")
    start_eval = Evaluation(start.id, Status.OK, shapes=(
        ShapeResult("n=1", correct=True, time_us=10.0, speedup_vs_start=1.0),))
    model = ScriptedModel(start, llm_s[0] * scale, llm_s[1] * scale, seed=per_gpu)
    workers = Workers(gpus, eval_s * scale)
    tracker = Tracker(RunInfo("llm_scale", "llm_scale", TASK, task.name, "cpp", per_gpu * gpus),
                      sinks=[])
    with LoopbackServer(model) as server:
        role = RoleModel("scripted", base_url=server.url, api_key_env="",
                         timeout_s=4 * llm_s[1] * scale + 5, max_retries=0)
        settings = LLMSettings(roles={name: role for name in ROLE_NAMES})
        def make_lineage(i: int) -> Callable[[], Lineage]:
            return lambda: Lineage(i, start, start_eval,
                                   llm_roles(settings, task, "cpp", lineage=i), KnobTuner(i),
                                   Budget(wall_s=window_s * scale))

        began = time.monotonic()
        threads = [threading.Thread(target=_drive, args=(make_lineage(i), tracker, workers, i),
                                    daemon=True) for i in range(per_gpu * gpus)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        end = began + window_s * scale
        calls = len(server.requests)
    tracker.close("window over")
    busy = workers.busy_s(began, end) / (gpus * window_s * scale)
    done = sum(1 for a, b in workers.intervals if b <= end)
    return Row(per_gpu, busy, done / (window_s / 60), calls)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lineages-per-gpu", default="1,2,4,8,16")
    parser.add_argument("--gpus", type=int, default=1, help="evaluation workers")
    parser.add_argument("--llm-s", default="5,20", help="LLM answer latency range, seconds")
    parser.add_argument("--eval-s", type=float, default=None,
                        help="seconds a candidate holds a worker (default: measured, see above)")
    parser.add_argument("--window-s", type=float, default=600.0,
                        help="measured span per configuration, unscaled seconds")
    parser.add_argument("--time-scale", type=float, default=1.0)
    args = parser.parse_args(argv)
    low, high = (float(v) for v in args.llm_s.split(","))
    if args.eval_s is None:
        eval_s = measure_eval_s()
        source = "measured: one real sandbox evaluation of silu_and_mul (cpp) on this machine"
    else:
        eval_s, source = args.eval_s, "given with --eval-s"
    print(f"LLM latency {low:g}-{high:g} s per call (planner, coder, analyst: 3 calls a step); "
          f"evaluation holds a worker {eval_s:.2f} s ({source}); {args.gpus} worker(s); "
          f"window {args.window_s:g} s; time scale {args.time_scale:g}")
    print(f"{'lineages/GPU':>12} {'busy':>7} {'GPU idle':>9} {'cand/min':>9} {'LLM calls':>10}")
    for per_gpu in (int(v) for v in args.lineages_per_gpu.split(",")):
        row = run_config(per_gpu, args.gpus, eval_s, (low, high), args.window_s,
                         args.time_scale)
        mark = "  >= 80% busy" if row.busy >= BUSY_TARGET else ""
        print(f"{row.lineages_per_gpu:>12} {row.busy:>7.1%} {1 - row.busy:>9.1%} "
              f"{row.candidates_per_min:>9.1f} {row.llm_calls:>10}{mark}", flush=True)


if __name__ == "__main__":
    main()
