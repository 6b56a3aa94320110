"""Seconds per evaluation through ``SandboxEvaluator``: what judging one candidate costs.

``python -m benchmarks.eval_cost TASK LANGUAGE DEVICE N [profile]``
builds N copies of the task's starting kernel that differ only by a comment (so no build or
verdict is reused; in a Triton module the comment goes inside each ``@triton.jit`` kernel, so
that Triton's own cache holds none of them either), as a compile pool would, before any is
judged, then evaluates them back to back in one evaluator, with profiling off (``profile``: on,
as the LLM agent has it by default). It prints one JSON line per evaluation (seconds, status,
per-phase seconds, seconds waited on each kind of request to the runner, the runner's own
timing steps, the seconds the evaluation waited for a build, the arena) on stderr and a summary
on stdout: the seconds building took, the first evaluation (which includes the evaluator's
start-up), the median of the others, the median of each phase and request over them, and the
build wait in all.
"""

from __future__ import annotations

import ast
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
    waits: list[float] = []
    with SandboxEvaluator(task_path, language, settings) as evaluator:
        began = time.perf_counter()
        built = [evaluator.compile(candidate) for candidate in candidates]
        build_s = time.perf_counter() - began
        for candidate in candidates:
            began = time.perf_counter()
            evaluation = evaluator.evaluate(candidate)
            seconds.append(time.perf_counter() - began)
            cost = evaluation.cost or EvaluationCost()  # None: it failed to build
            waits.append(cost.build_wait_s)
            phases.append({**cost.phase_s,
                           **{f"request.{k}": v for k, v in cost.request_s.items()},
                           **{f"runner.{k}": v for k, v in cost.runner_s.items()}})
            print(json.dumps({"eval_s": round(seconds[-1], 3), "status": evaluation.status.value,
                              "phase_s": dict(cost.phase_s), "request_s": dict(cost.request_s),
                              "runner_s": dict(cost.runner_s),
                              "build_wait_s": round(cost.build_wait_s, 3),
                              "jit_compiles": cost.jit_compiles, "arena": cost.arena,
                              "runner_started_as": cost.runner_started_as,
                              "message": evaluation.message[:300],
                              "shapes_runner_s": {
                                  label: detail.get("runner_warm_s") for label, detail in
                                  (evaluation.metrics.get("timing") or {}).items()}},
                             default=str), file=sys.stderr, flush=True)
    print(json.dumps({"task": task_name, "language": language, "device": device, "n": count,
                      "build_s": round(build_s, 3),
                      "build_median_s": round(statistics.median(b.seconds for b in built), 3),
                      "first_s": round(seconds[0], 3),
                      "median_s_after_first": round(statistics.median(seconds[1:]), 3)
                      if count > 1 else None,
                      "build_wait_s": round(sum(waits), 3),
                      "phase_median_s": _median_phases(phases[1:])}))
    return 0


def variants(start: Candidate, count: int) -> list[Candidate]:
    """``count`` copies of ``start`` that differ only by a comment in its language: a trailing
    one, and in a Triton module one inside each kernel too (Triton keys its own cache by the
    kernel's source alone)."""
    comment = language_spec(start.language).syntax.comment
    return [start.derive(source=_marked(start.source, start.language, f"{comment} variant {i}"))
            for i in range(count)]


def _marked(source: str, language: str, mark: str) -> str:
    if language == "triton":  # before the first statement of each @triton.jit kernel
        lines = source.splitlines()
        firsts = sorted((node.body[0].lineno, node.body[0].col_offset)
                        for node in ast.walk(ast.parse(source))
                        if isinstance(node, ast.FunctionDef)
                        and any("jit" in ast.unparse(d) for d in node.decorator_list))
        for lineno, column in reversed(firsts):
            lines.insert(lineno - 1, " " * column + mark)
        source = "\n".join(lines)
    return f"{source}\n{mark}\n"


def _median_phases(phases: list[dict[str, float]]) -> dict[str, float]:
    """Per phase (and per request to the runner), the median seconds over the evaluations."""
    names = sorted({name for p in phases for name in p})
    return {name: round(statistics.median(p.get(name, 0.0) for p in phases), 3)
            for name in names} if phases else {}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
