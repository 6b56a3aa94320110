"""Seconds per evaluation through ``SandboxEvaluator``: what judging one candidate costs.

``python -m kernelswarm.experiments.benchmarks.eval_cost TASK LANGUAGE DEVICE N [profile]``
builds N copies of the task's starting kernel that differ only by a trailing comment (so no
build or verdict is reused), then evaluates them back to back in one evaluator, with profiling
off (``profile``: on, as a search has it by default). It
prints one JSON line per evaluation (seconds, status, per-phase seconds, seconds waited on
each kind of request to the runner, the arena) on stderr and a summary on stdout: the first
evaluation (which includes the evaluator's start-up), the median of the others, and the median
of each phase and request over them.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from kernelswarm.evaluators import SandboxEvaluator
from kernelswarm.evaluators.settings import EvaluatorSettings
from kernelswarm.experiments.config import BUILTIN_TASKS
from kernelswarm.search.candidate import Candidate
from kernelswarm.search.language_spec import language_spec
from kernelswarm.search.measured import EvaluationCost
from kernelswarm.search.task import load_task


def main(argv: list[str]) -> int:
    if len(argv) not in (4, 5) or argv[4:] not in ([], ["profile"]):
        print(__doc__, file=sys.stderr)
        return 2
    task_name, language, device, count = argv[0], argv[1], argv[2], int(argv[3])
    builtin = BUILTIN_TASKS / task_name
    task_path = builtin if (builtin / "task.py").is_file() else Path(task_name)
    settings = EvaluatorSettings(device=device, profile_kernels=argv[4:] == ["profile"])
    start = load_task(task_path, device.split(":")[0]).starting_candidate(language)
    candidates = variants(start, count)
    seconds: list[float] = []
    phases: list[dict[str, float]] = []
    with SandboxEvaluator(task_path, language, settings) as evaluator:
        for candidate in candidates:
            evaluator.compile(candidate)
        for candidate in candidates:
            began = time.perf_counter()
            evaluation = evaluator.evaluate(candidate)
            seconds.append(time.perf_counter() - began)
            cost = evaluation.cost or EvaluationCost()  # None: it failed to build
            phases.append({**cost.phase_s,
                           **{f"request.{k}": v for k, v in cost.request_s.items()}})
            print(json.dumps({"eval_s": round(seconds[-1], 3), "status": evaluation.status.value,
                              "phase_s": dict(cost.phase_s), "request_s": dict(cost.request_s),
                              "arena": cost.arena, "runner_started_as": cost.runner_started_as},
                             default=str), file=sys.stderr, flush=True)
    print(json.dumps({"task": task_name, "language": language, "device": device, "n": count,
                      "first_s": round(seconds[0], 3),
                      "median_s_after_first": round(statistics.median(seconds[1:]), 3)
                      if count > 1 else None,
                      "phase_median_s": _median_phases(phases[1:])}))
    return 0


def variants(start: Candidate, count: int) -> list[Candidate]:
    """``count`` copies of ``start`` that differ only by a trailing comment in its language."""
    comment = language_spec(start.language).syntax.comment
    return [start.derive(source=f"{start.source}\n{comment} variant {i}\n")
            for i in range(count)]


def _median_phases(phases: list[dict[str, float]]) -> dict[str, float]:
    """Per phase (and per request to the runner), the median seconds over the evaluations."""
    names = sorted({name for p in phases for name in p})
    return {name: round(statistics.median(p.get(name, 0.0) for p in phases), 3)
            for name in names} if phases else {}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
