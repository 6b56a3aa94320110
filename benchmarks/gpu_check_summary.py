"""The GPU check's summary (``DIR/gpu-check.json``): built step by step and rewritten after each,
so a check cut at a time limit keeps what it did; resumable by a later call; and the caches a
fresh machine would measure again, packed for the next one (benchmarks/gpu_check.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kernelswarm.evaluators.settings import CACHE_ENV, default_cache_dir

TEST_CACHE_ENV = "KERNELSWARM_TEST_CACHE"  # tests/conftest.py: one cache for every test process
TEST_CACHE = Path(os.environ.get(TEST_CACHE_ENV)
                  or Path(tempfile.gettempdir()) / "kernelswarm-gpu-check")


class Check:
    """The summary being built, written out after every step."""

    def __init__(self, out: Path, gpus: int, budget_s: float,
                 pack_to: Path | None = None) -> None:
        self.out = out
        self.pack_to = pack_to
        self.tests_began = 0.0  # when the first GPU test started
        self.began = time.monotonic()
        self.budget_s = budget_s
        self.lock = threading.Lock()
        self.summary: dict[str, Any] = {
            "device": _device(), "versions": _versions(), "gpus": gpus,
            "eval_cost_median_s": {}, "eval_cost_first_s": {}, "eval_cost_phases_s": {},
            "eval_cost_by_language": {}, "evals_per_gpu_minute": {}, "search": {},
            "gpu_build_wait_s": {},
            "gpu_tests": {"passed": 0, "failed": 0, "skipped": 0, "errors": 0, "wall_s": 0.0,
                          "gpus": gpus, "failures": [], "not_reached": [], "files": {}},
            "steps": []}
        self.write()

    def left_s(self) -> float:
        return self.budget_s - (time.monotonic() - self.began)

    def resume(self, path: Path) -> None:
        """Carry on from an earlier check's summary: its measurements are kept and the steps
        it finished are not run again (a check split over calls of a limited length)."""
        earlier = json.loads(path.read_text())
        for key in ("eval_cost_median_s", "eval_cost_first_s", "eval_cost_phases_s",
                    "eval_cost_by_language", "evals_per_gpu_minute", "search",
                    "gpu_build_wait_s"):
            self.summary[key] = {**earlier.get(key, {}), **self.summary.get(key, {})}
        self.summary["steps"] = list(earlier.get("steps", [])) + self.summary["steps"]
        self.summary["resumed_from"] = earlier.get("resumed_from", []) + [
            {"device": earlier.get("device"), "steps": len(earlier.get("steps", []))}]
        self.write()

    def done(self, name: str) -> bool:
        """Whether a step of this name finished (exit status 0) in this check or the one it
        resumed."""
        return any(s["name"] == name and s["rc"] == 0 for s in self.summary["steps"])

    def eval_cost(self, task: str, language: str, line: dict[str, Any] | None) -> None:
        """Keep one eval_cost's summary line: ``cuda`` under the historical keys, every
        language under ``eval_cost_by_language``, its build wait under ``gpu_build_wait_s``."""
        with self.lock:
            if line:
                phases = line.get("phase_median_s") or {}
                if language == "cuda":
                    self.summary["eval_cost_median_s"][task] = line.get("median_s_after_first")
                    self.summary["eval_cost_first_s"][task] = line.get("first_s")
                    self.summary["eval_cost_phases_s"][task] = phases
                self.summary["eval_cost_by_language"].setdefault(language, {})[task] = {
                    "median_s": line.get("median_s_after_first"),
                    "first_s": line.get("first_s"), "build_s": line.get("build_s"),
                    "build_median_s": line.get("build_median_s"), "phases_s": phases}
                self.summary["gpu_build_wait_s"][f"eval_cost {task} {language}"] = \
                    line.get("build_wait_s", 0.0)
            self._total_wait()
            self.write()
        self.pack()

    def search(self, task: str, found: dict[str, Any]) -> None:
        """Keep one search's throughput: evaluations per GPU-minute after the start's verdict
        (``evals_per_gpu_minute``), per language, its build wait, and its start-up
        (``search_startup_s``: from the command's start to the search's)."""
        throughput = found["throughput"]
        after = throughput.get("after_start") or {}
        with self.lock:
            self.summary["evals_per_gpu_minute"][task] = after.get(
                "evals_per_gpu_minute", throughput["evals_per_gpu_minute"])
            self.summary["search"][task] = {**throughput, "search_best": found["search_best"],
                                            "languages": found.get("languages"),
                                            "search_startup_s": found.get("search_startup_s"),
                                            "command": found["command"]}
            self.summary["gpu_build_wait_s"][f"search {task}"] = throughput.get(
                "build_wait_s", 0.0)
            self._total_wait()
            self.write()
        self.pack()

    def _total_wait(self) -> None:
        waits = self.summary["gpu_build_wait_s"]
        waits["total"] = round(sum(v for k, v in waits.items() if k != "total"
                                   and isinstance(v, (int, float))), 3)

    def pack(self) -> None:
        """The caches a fresh machine would measure again (calibrations and baselines, the
        evaluations' and the GPU tests'), packed into ``--pack-cache`` for the next call."""
        if self.pack_to is None:
            return
        roots = [Path(os.environ.get(CACHE_ENV) or default_cache_dir()), TEST_CACHE]
        members = [d for root in roots for d in (root / "calibration", root / "baselines")
                   if d.is_dir()]
        if not members:
            return
        tmp = self.pack_to.with_suffix(".tmp")
        with tarfile.open(tmp, "w:gz") as tar:
            for member in members:
                tar.add(member, arcname=str(member.resolve()).lstrip("/"))
        os.replace(tmp, self.pack_to)

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
