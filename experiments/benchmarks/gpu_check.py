"""The GPU check: the GPU tests split over every visible GPU, what judging costs, one search.

``python -m kernelswarm.experiments.benchmarks.gpu_check --out DIR [--budget-s 540]``

On a GPU machine with the project installed, in one call that fits a 10-minute device lease:

1. ``eval_cost`` of the three Astra tasks (``cuda``, N evaluations each) and one short search
   (``search_gpu --no-judge``), one after the other on the first GPU, each alone on its GPU;
2. the GPU-marked tests, one ``pytest -m gpu`` per test file, the files dealt to every visible
   GPU as it frees up (heaviest first; the first GPU joins once its measurements are done), each
   process seeing only its own GPU (``CUDA_VISIBLE_DEVICES``), so that no two share one.

Every step has its own time limit, and the summary (``DIR/gpu-check.json``) is rewritten after
each step, so a call killed at its limit still returns what was done: device and versions,
``eval_cost_median_s`` and ``evals_per_gpu_minute`` per task, ``gpu_tests`` (passed, failed,
skipped, wall_s, gpus, the failures and the files not reached) and every step's exit status and
wall time. Each GPU's output goes to ``DIR/gpu-<n>.log``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

TASKS = ("silu_and_mul", "fused_add_rmsnorm", "merge_attn_states_lse")
TEST_CACHE_ENV = "KERNELSWARM_TEST_CACHE"  # tests/conftest.py: one cache for every test process
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


class Check:
    """The summary being built, written out after every step."""

    def __init__(self, out: Path, gpus: int, budget_s: float) -> None:
        self.out = out
        self.began = time.monotonic()
        self.budget_s = budget_s
        self.lock = threading.Lock()
        self.summary: dict[str, Any] = {
            "device": _device(), "versions": _versions(), "gpus": gpus,
            "eval_cost_median_s": {}, "eval_cost_first_s": {}, "eval_cost_phases_s": {},
            "evals_per_gpu_minute": {}, "search": {},
            "gpu_tests": {"passed": 0, "failed": 0, "skipped": 0, "errors": 0, "wall_s": 0.0,
                          "gpus": gpus, "failures": [], "not_reached": [], "files": {}},
            "steps": []}
        self.write()

    def left_s(self) -> float:
        return self.budget_s - (time.monotonic() - self.began)

    def write(self) -> None:
        path = self.out / "gpu-check.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.summary, indent=2, default=str))
        os.replace(tmp, path)

    def step(self, gpu: int, name: str, argv: list[str], limit_s: float,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess | None:
        """Run one step alone on ``gpu`` within ``limit_s`` (and the budget left); its output
        goes to the GPU's log; None when no time was left for it."""
        limit = min(limit_s, self.left_s() - 5)
        if limit < 15:
            return None
        began = time.monotonic()
        environment = {**os.environ, "CUDA_VISIBLE_DEVICES": str(gpu), "PYTHONUNBUFFERED": "1",
                       **(env or {})}
        with open(self.out / f"gpu-{gpu}.log", "a") as log:
            log.write(f"\n=== {name} (limit {limit:.0f} s) ===\n")
            log.flush()
            try:
                done = subprocess.run(argv, env=environment, stdout=subprocess.PIPE,
                                      stderr=log, text=True, timeout=limit)
                rc: int | str = done.returncode
            except subprocess.TimeoutExpired as exc:
                out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) \
                    else (exc.stdout or "")
                done, rc = subprocess.CompletedProcess(argv, 124, out, ""), "timeout"
            log.write(done.stdout or "")
        with self.lock:
            self.summary["steps"].append({"name": name, "gpu": gpu, "rc": rc,
                                          "wall_s": round(time.monotonic() - began, 1)})
            self.write()
        return done


def measure(check: Check, gpu: int, args: argparse.Namespace, search_minutes: float) -> None:
    """eval_cost of each task (with ``earlier``, silu_and_mul along the earlier data paths
    first), then one search, on ``gpu``."""
    python = sys.executable
    evaluations = args.evaluations
    for path, env in EARLIER_PATHS.items() if args.earlier else ():
        done = check.step(gpu, f"eval_cost silu_and_mul ({path})", [
            python, "-m", "kernelswarm.experiments.benchmarks.eval_cost", "silu_and_mul", "cuda",
            "cuda", str(evaluations)], limit_s=150, env=env)
        line = _last_json(done.stdout if done else "")
        with check.lock:
            check.summary.setdefault("eval_cost_earlier", {})[path] = line
            check.write()
    for task in args.tasks:
        done = check.step(gpu, f"eval_cost {task}", [
            python, "-m", "kernelswarm.experiments.benchmarks.eval_cost", task, "cuda", "cuda",
            str(evaluations)], limit_s=150)
        line = _last_json(done.stdout if done else "")
        with check.lock:
            if line:
                check.summary["eval_cost_median_s"][task] = line.get("median_s_after_first")
                check.summary["eval_cost_first_s"][task] = line.get("first_s")
                check.summary["eval_cost_phases_s"][task] = line.get("phase_median_s")
            check.write()
    if args.profile:
        done = check.step(gpu, "eval_cost silu_and_mul (profiling on)", [
            python, "-m", "kernelswarm.experiments.benchmarks.eval_cost", "silu_and_mul", "cuda",
            "cuda", str(evaluations), "profile"], limit_s=90)
        with check.lock:
            check.summary["eval_cost_profiled"] = _last_json(done.stdout if done else "")
            check.write()
    # the same evaluator again: its calibration now comes from the cache the first one filled
    done = check.step(gpu, "eval_cost silu_and_mul (calibration cached)", [
        python, "-m", "kernelswarm.experiments.benchmarks.eval_cost", "silu_and_mul", "cuda",
        "cuda", "2"], limit_s=90)
    line = _last_json(done.stdout if done else "")
    with check.lock:
        check.summary["first_evaluation_with_cached_calibration_s"] = \
            line.get("first_s") if line else None
        check.write()
    if search_minutes <= 0:
        return
    report = Path(tempfile.mkdtemp(prefix="gpu-check-")) / "search.json"
    check.step(gpu, "search_gpu silu_and_mul", [
        python, "-m", "kernelswarm.experiments.benchmarks.search_gpu", "--task", "silu_and_mul",
        "--lineages", "4", "--minutes", f"{search_minutes:g}", "--no-judge", "--json",
        str(report), "--out", str(report.parent / "runs")], limit_s=search_minutes * 60 + 120)
    if report.is_file():
        found = json.loads(report.read_text())
        with check.lock:
            check.summary["evals_per_gpu_minute"]["silu_and_mul"] = \
                found["throughput"]["evals_per_gpu_minute"]
            check.summary["search"]["silu_and_mul"] = {
                **found["throughput"], "search_best": found["search_best"],
                "command": found["command"]}
            check.write()


def run_tests(check: Check, gpu: int, queue: list[tuple[int, Path]], root: Path) -> None:
    """Take test files off ``queue`` and run each alone on ``gpu``."""
    while True:
        with check.lock:
            if not queue:
                return
            _, path = queue.pop(0)
        name = str(path.relative_to(root))
        report = Path(tempfile.mkdtemp(prefix="gpu-check-")) / "junit.xml"
        done = check.step(gpu, f"pytest {name}", [
            sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider", "-q", "-rfE",
            "--durations=5", f"--junitxml={report}", name], limit_s=420,
            env={TEST_CACHE_ENV: str(Path(tempfile.gettempdir()) / "kernelswarm-gpu-check")})
        with check.lock:
            tests = check.summary["gpu_tests"]
            if done is None:
                tests["not_reached"].append(name)
            else:
                counts = _junit(report)
                tests["files"][name] = {**counts, "rc": done.returncode}
                for key in ("passed", "failed", "skipped", "errors"):
                    tests[key] += counts.get(key, 0)
                tests["failures"] += [line for line in (done.stdout or "").splitlines()
                                      if line.startswith(("FAILED", "ERROR"))][:20]
                if done.returncode == 124:
                    tests["failures"].append(f"TIMEOUT {name}")
            tests["wall_s"] = round(time.monotonic() - check.began, 1)
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


def _device() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                               "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": sys.version.split()[0]}
    for name in ("torch", "triton", "cuda-bindings", "ray", "kernelswarm"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            pass
    return found


def _gpu_count() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernelswarm.experiments.benchmarks.gpu_check",
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
    args = parser.parse_args(argv)
    gpus = _gpu_count()
    if gpus < 1:
        print("no GPU visible (nvidia-smi -L lists none)", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    check = Check(args.out, gpus, args.budget_s)
    root = Path.cwd()
    queue = [] if args.no_tests else [
        (w, p) for w, p in gpu_test_files(root / args.tests)
        if args.only is None or str(p.relative_to(root)) in args.only]

    def lane(gpu: int) -> None:
        if gpu == 0 and not args.no_measure:
            measure(check, 0, args, args.search_minutes)
        run_tests(check, gpu, queue, root)

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
        "eval_cost_median_s", "eval_cost_first_s", "evals_per_gpu_minute")}))
    for line in tests["failures"][:30]:
        print(line)
    return 0 if tests["failed"] == 0 and tests["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
