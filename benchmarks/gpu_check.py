"""The GPU check: what judging costs, searches' throughput, the GPU tests, and what got slower.

``python -m benchmarks.gpu_check --out DIR [--budget-s 540]``

On a GPU machine with the project installed:

1. ``eval_cost`` of the three Astra tasks in each of ``--languages`` (cuda and triton; N
   evaluations each, built ahead as a compile pool would) and one search per task
   (``search_gpu --no-judge``, 4 lineages of cuda and triton), one after the other on the first
   GPU, each alone on its GPU;
2. the GPU-marked tests: on one GPU in one pytest; on several, one ``pytest -m gpu`` per test
   file, the files dealt to every visible GPU as it frees up (heaviest first; the first GPU
   joins once its measurements are done), each process seeing only its own GPU
   (``CUDA_VISIBLE_DEVICES``), so that no two share one;
3. the figures compared with the newest committed ``docs/measurements/gpu-check-*.json``
   (benchmarks/gpu_regressions.py): every figure of judging more than 20% slower is
   printed and kept under ``regressions``.

Every step has its own time limit, and the summary (``DIR/gpu-check.json``) is rewritten after
each step, so a call killed at its limit still returns what was done: device and versions,
``eval_cost_median_s``, ``eval_cost_first_s`` and ``eval_cost_phases_s`` per task (cuda),
``eval_cost_by_language``, ``evals_per_gpu_minute`` per task (after the start's verdict),
each search's throughput and ``search_startup_s`` (under ``search``),
``gpu_build_wait_s`` (the seconds evaluations waited for a build, per step and in all),
``gpu_tests`` (passed, failed, skipped, wall_s, gpus, the failures and the files not reached)
and every step's exit status and wall time. Each GPU's output goes to ``DIR/gpu-<n>.log``.
``--pack-cache FILE`` keeps the calibrations and baselines measured, for the next machine;
``--resume SUMMARY`` carries on from a check that a time limit cut, skipping its finished steps.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

from benchmarks.gpu_check_summary import TEST_CACHE, TEST_CACHE_ENV, Check
from benchmarks.gpu_regressions import latest_check
from benchmarks.gpu_regressions import report as regression_report

TASKS = ("silu_and_mul", "fused_add_rmsnorm", "merge_attn_states_lse")
# eval_cost of silu_and_mul as the project judged before runners were forked on a GPU and
# tensors stayed on it, and with only the first of the two: the "before" of the cost table
EARLIER_PATHS = {"interpreter runner, host arena": {"KERNELSWARM_RUNNER_TEMPLATE": "0",
                                                    "KERNELSWARM_DEVICE_ARENA": "0"},
                 "forked runner, host arena": {"KERNELSWARM_DEVICE_ARENA": "0"}}
_MARKED = re.compile(r"pytest\.mark\.gpu|pytestmark *= *.*gpu")
_TEST = re.compile(r"^(    )?def test_", re.MULTILINE)
_PARAMS = re.compile(r"pytest\.mark\.parametrize\([^\[]*\[([^\]]*)\]", re.DOTALL)


def gpu_test_files(root: Path) -> list[tuple[int, Path]]:
    """(weight, file) of every test file with GPU-marked tests, heaviest first; the weight
    counts test functions and parametrised cases."""
    found = []
    for path in sorted(root.rglob("test_*.py")):
        text = path.read_text(errors="replace")
        if not _MARKED.search(text):
            continue
        weight = len(_TEST.findall(text)) + text.count("Case(") + sum(
            m.group(1).count("(") or m.group(1).count(",") for m in _PARAMS.finditer(text))
        found.append((max(weight, 1), path))
    return sorted(found, key=lambda x: -x[0])


def measure(check: Check, gpu: int, args: argparse.Namespace, search_minutes: float) -> None:
    """eval_cost of each task in each language (with ``earlier``, silu_and_mul along the
    earlier data paths first), then one search per task, on ``gpu``."""
    python = sys.executable
    evaluations = args.evaluations
    for path, env in EARLIER_PATHS.items() if args.earlier else ():
        done = check.step(gpu, f"eval_cost silu_and_mul ({path})", [
            python, "-m", "benchmarks.eval_cost", "silu_and_mul", "cuda",
            "cuda", str(evaluations)], limit_s=150, env=env)
        line = _last_json(done.stdout if done else "")
        with check.lock:
            check.summary.setdefault("eval_cost_earlier", {})[path] = line
            check.write()
    for language in args.languages:
        for task in args.tasks:
            name = f"eval_cost {task}" + ("" if language == "cuda" else f" {language}")
            if check.done(name):
                continue
            done = check.step(gpu, name, [
                python, "-m", "benchmarks.eval_cost", task, language,
                "cuda", str(evaluations)], limit_s=args.eval_cost_limit_s)
            check.eval_cost(task, language, _last_json(done.stdout if done else ""))
    if args.profile:
        done = check.step(gpu, "eval_cost silu_and_mul (profiling on)", [
            python, "-m", "benchmarks.eval_cost", "silu_and_mul", "cuda",
            "cuda", str(evaluations), "profile"], limit_s=90)
        with check.lock:
            check.summary["eval_cost_profiled"] = _last_json(done.stdout if done else "")
            check.write()
    if search_minutes <= 0:
        return
    for task in args.search_tasks:
        name = f"search_gpu {task}"
        if check.done(name):
            continue
        report = Path(tempfile.mkdtemp(prefix="gpu-check-")) / "search.json"
        check.step(gpu, name, [
            python, "-m", "benchmarks.search_gpu", "--task", task,
            "--lineages", str(args.search_lineages), "--languages", args.search_languages,
            "--minutes", f"{search_minutes:g}", "--no-judge", "--json", str(report),
            "--out", str(report.parent / "runs")], limit_s=search_minutes * 60 + 150)
        if report.is_file():
            check.search(task, json.loads(report.read_text()))


def run_tests(check: Check, gpu: int, queue: list[tuple[int, Path]], root: Path,
              together: bool = False) -> None:
    """Take test files off ``queue`` and run each alone on ``gpu`` (``together``: all of them
    in one pytest, which saves a process start-up per file where one GPU runs them all)."""
    while True:
        with check.lock:
            if not queue:
                return
            files = [path for _, path in queue] if together else [queue[0][1]]
            del queue[:len(files)]
            check.tests_began = check.tests_began or time.monotonic()
        names = [str(path.relative_to(root)) for path in files]
        name = names[0] if len(names) == 1 else f"{len(names)} GPU test files"
        report = Path(tempfile.mkdtemp(prefix="gpu-check-")) / "junit.xml"
        done = check.step(gpu, f"pytest {name}", [
            sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider", "-q", "-rfE",
            "--durations=15", f"--junitxml={report}", *names],
            limit_s=420 * len(names) if len(names) == 1 else check.left_s(),
            env={TEST_CACHE_ENV: str(TEST_CACHE)})
        with check.lock:
            tests = check.summary["gpu_tests"]
            if done is None:
                tests["not_reached"] += names
            else:
                counts = _junit(report)
                tests["files"][name] = {**counts, "rc": done.returncode}
                for key in ("passed", "failed", "skipped", "errors"):
                    tests[key] += counts.get(key, 0)
                tests["failures"] += [line for line in (done.stdout or "").splitlines()
                                      if line.startswith(("FAILED", "ERROR"))][:40]
                tests["durations"] = [line for line in (done.stdout or "").splitlines()
                                      if re.match(r"\d+\.\d+s (call|setup|teardown)", line)]
                if done.returncode == 124:
                    tests["failures"].append(f"TIMEOUT {name}")
            tests["wall_s"] = round(time.monotonic() - check.tests_began, 1)
            check.write()


def _junit(path: Path) -> dict[str, int]:
    if not path.is_file():
        return {}
    try:
        root = ElementTree.parse(path).getroot()
    except ElementTree.ParseError:
        return {}
    suites = [root] if root.tag == "testsuite" else list(root)
    total = {k: sum(int(s.get(k, 0)) for s in suites)
             for k in ("tests", "failures", "errors", "skipped")}
    return {"passed": total["tests"] - total["failures"] - total["errors"] - total["skipped"],
            "failed": total["failures"], "errors": total["errors"], "skipped": total["skipped"]}


def _last_json(text: str) -> dict[str, Any] | None:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def _gpu_count() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget-s", type=float, default=540.0)
    parser.add_argument("--evaluations", type=int, default=6, help="per eval_cost task")
    parser.add_argument("--search-minutes", type=float, default=1.5)
    parser.add_argument("--earlier", action="store_true",
                        help="also eval_cost silu_and_mul along the earlier data paths")
    parser.add_argument("--no-tests", action="store_true")
    parser.add_argument("--only", nargs="*", default=None, metavar="TEST_FILE",
                        help="run only these GPU test files")
    parser.add_argument("--tasks", nargs="*", default=list(TASKS), help="eval_cost's tasks")
    parser.add_argument("--profile", action="store_true",
                        help="eval_cost of silu_and_mul with profiling on too")
    parser.add_argument("--no-measure", action="store_true")
    parser.add_argument("--tests", default="tests", help="the folder whose GPU tests run")
    parser.add_argument("--languages", nargs="*", default=["cuda", "triton"],
                        help="eval_cost's languages (default: cuda triton)")
    parser.add_argument("--eval-cost-limit-s", type=float, default=240.0,
                        help="the limit of one eval_cost (a fresh machine calibrates in it)")
    parser.add_argument("--search-tasks", nargs="*", default=list(TASKS),
                        help="one search per task (default: the three Astra tasks)")
    parser.add_argument("--search-lineages", type=int, default=4)
    parser.add_argument("--search-languages", default="cuda,triton",
                        help="the searches' languages, comma-separated (lineages take them in "
                             "turn)")
    parser.add_argument("--pack-cache", type=Path, metavar="FILE.tar.gz",
                        help="after each measurement, pack the calibration and baseline caches "
                             "here (unpack into / on the next machine)")
    parser.add_argument("--resume", type=Path, metavar="GPU_CHECK_JSON",
                        help="keep an earlier check's measurements and skip its finished steps")
    parser.add_argument("--compare", default="auto", metavar="GPU_CHECK_JSON|auto|none",
                        help="the check to compare with (auto: the newest "
                             "docs/measurements/gpu-check-*.json)")
    args = parser.parse_args(argv)
    gpus = _gpu_count()
    if gpus < 1:
        print("no GPU visible (nvidia-smi -L lists none)", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    check = Check(args.out, gpus, args.budget_s, args.pack_cache)
    if args.resume is not None:
        check.resume(args.resume)
    root = Path.cwd()
    queue = [] if args.no_tests else [
        (w, p) for w, p in gpu_test_files(root / args.tests)
        if args.only is None or str(p.relative_to(root)) in args.only]

    def lane(gpu: int) -> None:
        if gpu == 0 and not args.no_measure:
            measure(check, 0, args, args.search_minutes)
        run_tests(check, gpu, queue, root, together=gpus == 1)
        check.pack()

    threads = [threading.Thread(target=lane, args=(g,)) for g in range(gpus)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with check.lock:
        check.summary["gpu_tests"]["not_reached"] += [str(p.relative_to(root)) for _, p in queue]
        check.write()
    tests = check.summary["gpu_tests"]
    print(f"GPU tests on {gpus} GPU(s) in {tests['wall_s']:.0f} s: {tests['passed']} passed, "
          f"{tests['failed']} failed, {tests['errors']} errors, {tests['skipped']} skipped, "
          f"{len(tests['not_reached'])} file(s) not reached")
    print(json.dumps({k: check.summary[k] for k in (
        "eval_cost_median_s", "eval_cost_first_s", "evals_per_gpu_minute",
        "gpu_build_wait_s")}))
    compared = _compared(args.compare, root, args.out / "gpu-check.json")
    if compared is not None:
        found, text = regression_report(compared, check.summary)
        with check.lock:
            check.summary["compared_with"] = str(compared.relative_to(root)) \
                if compared.is_relative_to(root) else str(compared)
            check.summary["regressions"] = [r.as_json() for r in found]
            check.write()
        print(text)
    for line in tests["failures"][:30]:
        print(line)
    return 0 if tests["failed"] == 0 and tests["errors"] == 0 else 1


def _compared(choice: str, root: Path, own: Path) -> Path | None:
    if choice == "none":
        return None
    if choice != "auto":
        return Path(choice)
    return latest_check(root / "docs" / "measurements", exclude=own)


if __name__ == "__main__":
    sys.exit(main())
