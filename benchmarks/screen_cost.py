"""What screening saves per candidate: seconds of a full evaluation against a screened-out one.

``python -m benchmarks.screen_cost TASK LANGUAGE DEVICE N [SHAPES...]``
builds 2 x N copies of the task's starting kernel that differ only by a comment (no build or
verdict is reused: benchmarks/eval_cost.py ``variants``), evaluates the first N in full and, for
each screen size in SHAPES (default: 1 and 3), N of the others against a bar of 100x the start on
every shape, where each is screened out after its screening shapes (search/screening.py). It
prints a table on stderr and one JSON line on stdout: per screen size, the median seconds of an
evaluation, of its timing phase, its status counts, and the share of the full evaluation's
seconds it saves. The first evaluation (the evaluator's start-up) is left out of every median.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from pathlib import Path

from kernelswarm.evaluators import SandboxEvaluator
from kernelswarm.evaluators.settings import EvaluatorSettings
from kernelswarm.experiments.config import BUILTIN_TASKS
from kernelswarm.search import Evaluation, Screen
from kernelswarm.search.task import load_task

from .eval_cost import variants

BAR = 100.0  # far above any kernel here: every screened evaluation is screened out


def main(argv: list[str]) -> int:
    if len(argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    task_name, language, device, count = argv[0], argv[1], argv[2], int(argv[3])
    sizes = [int(a) for a in argv[4:]] or [1, 3]
    builtin = BUILTIN_TASKS / task_name
    task_path = builtin if (builtin / "task.py").is_file() else Path(task_name)
    task = load_task(task_path, device.split(":")[0])
    labels = [shape.label for shape in task.tuning_shapes]
    sizes = [n for n in sizes if 0 < n < len(labels)]
    start = task.starting_candidate(language)
    candidates = variants(start, count * (1 + len(sizes)) + 1)
    rows: dict[str, dict[str, float | int | dict[str, int]]] = {}
    with SandboxEvaluator(task_path, language, EvaluatorSettings(device=device)) as evaluator:
        for candidate in candidates:
            evaluator.compile(candidate)
        own = evaluator.evaluate(candidates[0]).as_own_start()  # the start-up, left out
        if not own.ok:
            print(f"the starting kernel is {own.status.value}: {own.message}", file=sys.stderr)
            return 1
        rest = iter(candidates[1:])
        rows["full"] = _judged([evaluator.evaluate(next(rest)) for _ in range(count)])
        for n in sizes:
            screen = Screen.of(own, n)
            assert screen is not None
            screen = Screen(screen.shapes, tuple((s, BAR, math.nan) for s, _, _ in screen.bar))
            rows[f"screen {n}"] = _judged([evaluator.evaluate_screened(next(rest), screen)
                                           for _ in range(count)])
    full = float(rows["full"]["median_s"])
    for row in rows.values():
        row["saves"] = round(1.0 - float(row["median_s"]) / full, 3) if full > 0 else math.nan
    print(f"{task_name} {language} on {device}: {len(labels)} tuning shapes, {count} "
          f"evaluations each", file=sys.stderr)
    print(f"{'':>10} {'median s':>9} {'timing s':>9} {'saves':>6}  statuses", file=sys.stderr)
    for name, row in rows.items():
        print(f"{name:>10} {row['median_s']:>9.3f} {row['timing_median_s']:>9.3f} "
              f"{row['saves']:>6.0%}  {row['statuses']}", file=sys.stderr)
    print(json.dumps({"task": task_name, "language": language, "device": device, "n": count,
                      "shapes": len(labels), "at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                 time.gmtime()),
                      "rows": rows}))
    return 0


def _judged(evaluations: list[Evaluation]) -> dict[str, float | int | dict[str, int]]:
    statuses: dict[str, int] = {}
    for e in evaluations:
        statuses[e.status.value] = statuses.get(e.status.value, 0) + 1
    timing = [(e.cost.phase_s if e.cost else {}).get("timing", math.nan) for e in evaluations]
    return {"median_s": round(statistics.median(e.eval_s for e in evaluations), 3),
            "timing_median_s": round(statistics.median(timing), 3), "statuses": statuses}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
