"""Seconds per evaluation through ``SandboxEvaluator``: what judging one candidate costs.

``python -m kernelswarm.experiments.benchmarks.eval_cost TASK LANGUAGE DEVICE N`` builds N
copies of the task's starting kernel that differ only by a trailing comment (so no build or
verdict is reused), then evaluates them back to back in one evaluator with profiling off. It
prints one JSON line per evaluation (seconds, status, per-phase seconds) on stderr and a summary
on stdout: the first evaluation (which includes the evaluator's start-up) and the median of the
others.
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
from kernelswarm.search.task import load_task


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    task_name, language, device, count = argv[0], argv[1], argv[2], int(argv[3])
    builtin = BUILTIN_TASKS / task_name
    task_path = builtin if (builtin / "task.py").is_file() else Path(task_name)
    settings = EvaluatorSettings(device=device, profile_kernels=False)
    start = load_task(task_path, device.split(":")[0]).starting_candidate(language)
    comment = "#" if language == "triton" else "//"
    candidates = [start.derive(source=f"{start.source}\n{comment} variant {i}\n")
                  for i in range(count)]
    seconds = []
    with SandboxEvaluator(task_path, language, settings) as evaluator:
        for candidate in candidates:
            evaluator.compile(candidate)
        for candidate in candidates:
            began = time.perf_counter()
            evaluation = evaluator.evaluate(candidate)
            seconds.append(time.perf_counter() - began)
            print(json.dumps({"eval_s": round(seconds[-1], 3), "status": evaluation.status.value,
                              "phase_s": evaluation.metrics.get("phase_s")}, default=str),
                  file=sys.stderr, flush=True)
    print(json.dumps({"task": task_name, "language": language, "device": device, "n": count,
                      "first_s": round(seconds[0], 3),
                      "median_s_after_first": round(statistics.median(seconds[1:]), 3)
                      if count > 1 else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
