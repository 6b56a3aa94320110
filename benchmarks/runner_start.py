"""How long a runner takes from spawn to ready, forked from the runner template and started as an
interpreter of its own (``KERNELSWARM_RUNNER_TEMPLATE=0``), on a machine with nothing else to do.

    python -m benchmarks.runner_start [TASK] [LANGUAGE] [N]

For each way, in a process of its own (the template is per process): one evaluator is built and
judges the task's starting kernel once (so the template, the calibration and the caches are
warm), then N runners are spawned one after another and each is timed until its ``ready`` reply
(torch where it is not imported yet, the task, the starting kernel). Prints a table of the
median and the range. Defaults: silu_and_mul, cpp, 5 runners, on the CPU.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from kernelswarm.evaluators import SandboxEvaluator
from kernelswarm.evaluators.judge.runner_template import SWITCH_ENV
from kernelswarm.evaluators.settings import EvaluatorSettings
from kernelswarm.experiments.config import BUILTIN_TASKS


def measure(task: str, language: str, count: int) -> list[float]:
    """Seconds from spawn to ready of ``count`` runners, in this process."""
    builtin = BUILTIN_TASKS / task
    folder = builtin if (builtin / "task.py").is_file() else Path(task)
    settings = EvaluatorSettings(device="cpu", profile_kernels=False, timing_budget_s=0.05,
                                 min_repeats=3, flush_cache=False)
    seconds = []
    with SandboxEvaluator(folder, language, settings) as evaluator:
        evaluator.evaluate(evaluator.start_candidate)
        spares = evaluator._spares
        spares.wait()
        for _ in range(count):
            began = time.perf_counter()
            runner = spares._spawn()
            runner.wait_ready(120.0)
            seconds.append(time.perf_counter() - began)
            runner.close()
    return seconds


def main(argv: list[str]) -> int:
    if argv[:1] == ["--measure"]:
        print(json.dumps(measure(argv[1], argv[2], int(argv[3]))))
        return 0
    task, language, count = (argv + ["silu_and_mul", "cpp", "5"][len(argv):])[:3]
    rows = []
    for label, switch in (("forked from the template", "1"), ("an interpreter of its own", "0")):
        done = subprocess.run(
            [sys.executable, "-m", __spec__.name, "--measure", task, language, count],
            env={**os.environ, SWITCH_ENV: switch}, capture_output=True, text=True, check=True)
        seconds = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append((label, statistics.median(seconds), min(seconds), max(seconds)))
    print(f"runner start-up, {task} ({language}) on the CPU, {count} runners each")
    print(f"{'runner':<28} {'median s':>9} {'min s':>7} {'max s':>7}")
    for label, median, low, high in rows:
        print(f"{label:<28} {median:>9.3f} {low:>7.3f} {high:>7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
