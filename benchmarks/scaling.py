"""How a sweep and a knob study scale over the GPUs of one machine (docs/cluster.md "Several GPUs").

``python -m benchmarks.scaling --out DIR [--steps ...] [--gpus 1 2 4]``

On a GPU machine with the project installed, each step a command a user would type, run with
``CUDA_VISIBLE_DEVICES`` naming the GPUs it may use, under its own time limit:

- ``calibrate``: ``kernelswarm sweep experiments/sweep_gpu.toml`` (Astra's three kernels x
  {cuda, triton}, 4 lineages a cell) on every GPU with ``search.wall_time_s=1``: each task and
  language is calibrated once for the machine, the calibrations spread over the GPUs;
- ``sweeps``: the same sweep for ``--minutes`` on the first 1, 2 and 4 GPUs (the same wall time,
  so the same GPU time per GPU), calibrations read from the cache. Per run: evaluations a minute
  and the workers' busy share, overall and minute by minute, from the sweep's ``workers.json``
  (an evaluation counts when it ends inside the window: the pool's start to its last interval);
  the GPUs' utilisation as ``nvidia-smi`` samples it every second; each cell's best;
- ``timing``: one kernel (the task's cuda ``silu_and_mul``) judged with ``kernelswarm eval
  --repeats 5`` on GPU 0 alone, then while a sweep keeps the other GPUs busy, then alone again:
  the per-shape times compared;
- ``tune``: ``kernelswarm tune silu_and_mul --language cuda --trials 80`` over the stream
  structure's launch knobs (186 settings; the task's own kernel has 5) on 4 GPUs and on 1,
  after two trials that calibrate;
- ``fault``: a one-task sweep on every GPU; once it has recorded evaluations, one evaluation
  worker's process is killed (SIGKILL). The cell must finish, keep every evaluation recorded
  before the kill, and go on judging on every GPU (Ray restarts the worker).

Results: ``DIR/scaling.json``, rewritten after every step (a call killed at its limit keeps what
was done), and each command's output in ``DIR/<step>.log``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import tomllib

from kernelswarm.experiments.config import QUICKSTART

SWEEP_FILE = QUICKSTART.with_name("sweep_gpu.toml")
STEPS = ("calibrate", "sweeps", "timing", "tune", "fault")
CLI = [sys.executable, "-m", "kernelswarm.experiments.commands.cli"]
STREAM_KNOBS = {"BLOCK": list(range(64, 1025, 32)), "WAVES": [1, 2, 3, 4, 6, 8]}
KEEP_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NVSHMEM_DISABLE_NVLS": "1", "PYTHONUNBUFFERED": "1"}


def visible(gpus: list[int]) -> dict[str, str]:
    return {**os.environ, **KEEP_ENV, "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))}


def gpu_count() -> int:
    done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    return len([line for line in done.stdout.splitlines() if line.startswith("GPU ")])


class Sampler:
    """``nvidia-smi`` utilisation of every GPU, once a second, while it runs."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._out = open(path, "w")  # noqa: SIM115 - closed in stop()
        self._process = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=timestamp,index,utilization.gpu,memory.used",
             "--format=csv,noheader,nounits", "-lms", "1000"], stdout=self._out,
            stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
        self._out.close()

    def mean_utilisation(self, gpus: list[int], since: float, until: float) -> dict[str, float]:
        """Mean utilisation (%) per GPU over the samples taken between two Unix times."""
        samples: dict[int, list[float]] = {g: [] for g in gpus}
        for line in self.path.read_text().splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) < 3:
                continue
            try:
                when = time.mktime(time.strptime(parts[0].split(".")[0], "%Y/%m/%d %H:%M:%S"))
                index, used = int(parts[1]), float(parts[2])
            except ValueError:
                continue
            if index in samples and since <= when <= until:
                samples[index].append(used)
        return {str(g): round(statistics.fmean(v), 1) for g, v in samples.items() if v}


class Report:
    """``scaling.json``, written after every step."""

    def __init__(self, out: Path, budget_s: float, argv: list[str]) -> None:
        self.out = out
        self.began = time.monotonic()
        self.budget_s = budget_s
        self.doc: dict[str, Any] = {"command": "python -m benchmarks."
                                               "scaling " + " ".join(argv),
                                    "device": _device(), "versions": _versions(),
                                    "gpus": gpu_count(), "steps": {}}
        self.write()

    def left_s(self) -> float:
        return self.budget_s - (time.monotonic() - self.began)

    def step(self, name: str, result: dict[str, Any]) -> None:
        self.doc["steps"][name] = result
        self.write()

    def write(self) -> None:
        temporary = self.out / ".scaling.json.tmp"
        temporary.write_text(json.dumps(self.doc, indent=1, default=str))
        temporary.replace(self.out / "scaling.json")


def _device() -> str:
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                               "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=60)
        return "; ".join(sorted(set(done.stdout.strip().splitlines())))
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown ({exc})"


def _versions() -> dict[str, str]:
    import importlib.metadata

    found = {"python": sys.version.split()[0]}
    for package in ("torch", "triton", "ray", "optuna", "mlflow-skinny", "cuda-bindings",
                    "liger-kernel"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


def _run(command: list[str], env: dict[str, str], log: Path, limit_s: float,
         cwd: Path | None = None) -> tuple[int, float, str]:
    """(exit status, seconds, output); 124 when the limit ended it (its process group killed)."""
    began = time.monotonic()
    with open(log, "a") as out:
        out.write(f"$ CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES', '')} "
                  f"{' '.join(command)}\n")
        out.flush()
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   cwd=cwd, start_new_session=True)
        try:
            rc = process.wait(max(limit_s, 1.0))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            rc = 124
    text = log.read_text(errors="replace")
    return rc, time.monotonic() - began, text


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


def derived_sweep(path: Path, tasks: list[str], languages: list[str], name: str) -> Path:
    """``experiments/sweep_gpu.toml`` with another grid of tasks and languages, in ``path``."""
    doc = tomllib.loads(SWEEP_FILE.read_text())
    lines = ["[sweep]", f"name = {json.dumps(name)}",
             f"base = {json.dumps(str(QUICKSTART))}", 'out_dir = "sweeps"', "", "[base]"]
    lines += [f"{key} = {_toml_value(value)}" for key, value in _flat(doc["base"]).items()]
    lines += ["", "[grid]", f"tasks = {_toml_value(tasks)}",
              f"languages = {_toml_value(languages)}", ""]
    path.write_text("\n".join(lines))
    return path


def _flat(doc: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in doc.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _sweep_dir(text: str) -> Path | None:
    found = re.findall(r"^sweep folder \(log: [^)]*\):\n(\S+)$", text, re.MULTILINE)
    return Path(found[-1]) if found else None


def sweep_figures(sweep_dir: Path | None) -> dict[str, Any]:
    """The workers' summary (workers.json) and each cell's row (cells.parquet)."""
    if sweep_dir is None or not (sweep_dir / "workers.json").is_file():
        return {"error": "the sweep wrote no workers.json"}
    workers = json.loads((sweep_dir / "workers.json").read_text())
    cells = []
    if (sweep_dir / "cells.parquet").is_file():
        import pyarrow.parquet as pq

        for row in pq.read_table(sweep_dir / "cells.parquet").to_pylist():
            cells.append({k: row[k] for k in (
                "cell", "status", "message", "task", "language", "records", "evaluations",
                "eval_s", "speedup_vs_start", "speedup_vs_best", "best_baseline",
                "speedup_vs_compile")})
    return {"sweep_dir": str(sweep_dir), "workers": workers["summary"],
            "placements": workers["workers"], "cells": cells}


def sweep_on(gpus: list[int], sweep_file: Path, out: Path, sets: list[str], log: Path,
             limit_s: float, sampler: Sampler | None = None) -> dict[str, Any]:
    """The sweep run in the folder ``out`` (its sweep folder under ``out/sweeps``)."""
    out.mkdir(parents=True, exist_ok=True)
    command = [*CLI, "sweep", str(sweep_file)]
    for setting in sets:
        command += ["--set", setting]
    began = time.time()
    rc, seconds, text = _run(command, visible(gpus), log, limit_s, cwd=out)
    result = {"gpus": len(gpus), "rc": rc, "wall_s": round(seconds, 1),
              **sweep_figures(_sweep_dir(text))}
    if sampler is not None and "workers" in result:
        window_end = began + seconds
        result["nvidia_smi_utilisation"] = sampler.mean_utilisation(gpus, began, window_end)
    return result


def step_calibrate(report: Report, out: Path, gpus: list[int]) -> None:
    log = out / "calibrate.log"
    result = sweep_on(gpus, SWEEP_FILE, out / "calibrate", ["search.wall_time_s=1",
                                                             "search.confirm_top=0"],
                      log, min(report.left_s(), 420))
    report.step("calibrate", result)


def step_sweeps(report: Report, out: Path, counts: list[int], minutes: float,
                sampler: Sampler) -> None:
    runs: dict[str, Any] = {}
    for n in counts:
        if report.left_s() < minutes * 60 + 60:
            runs[str(n)] = {"error": f"not run: {report.left_s():.0f} s left"}
            continue
        runs[str(n)] = sweep_on(list(range(n)), SWEEP_FILE, out / f"sweep-{n}",
                                [f"search.wall_time_s={minutes * 60:g}",
                                 "search.confirm_top=0"],
                                out / f"sweep-{n}.log", min(report.left_s(), minutes * 60 + 240),
                                sampler)
        base = runs.get("1", {}).get("workers", {}).get("evaluations_per_minute")
        for run in runs.values():
            rate = run.get("workers", {}).get("evaluations_per_minute")
            if base and rate:
                run["vs_one_gpu"] = round(rate / base, 3)
        report.step("sweeps", {"minutes": minutes, "runs": runs})


def _shape_times(text: str) -> dict[str, float]:
    start = text.rfind("\n{")
    doc = json.loads(text[start:]) if start >= 0 else {}
    return {s["shape"]: s["time_us"] for s in doc.get("shapes", ()) if s.get("time_us")}


def step_timing(report: Report, out: Path, gpus: list[int], minutes: float) -> None:
    kernel = QUICKSTART.parent / "tasks" / "silu_and_mul" / "silu_and_mul.cu"
    judge = [*CLI, "eval", "silu_and_mul", str(kernel), "--device", "cuda", "--json",
             "--repeats", "5"]
    result: dict[str, Any] = {"kernel": str(kernel.name), "command": " ".join(judge[1:])}
    times: dict[str, dict[str, float]] = {}
    log = out / "timing.log"
    rc, _, text = _run(judge, visible([0]), out / "alone-1.json.log",
                       min(report.left_s(), 240))
    times["alone 1"] = _shape_times(text) if rc in (0, 1) else {}
    load = None
    if len(gpus) > 1:
        sweep_file = derived_sweep(out / "load.toml", ["silu_and_mul"], ["cuda", "triton"],
                                   "load")
        command = [*CLI, "sweep", str(sweep_file), "--set",
                   f"search.wall_time_s={minutes * 60:g}", "--set", "search.confirm_top=0"]
        (out / "load").mkdir(exist_ok=True)
        with open(log, "w") as load_log:
            load = subprocess.Popen(command, env=visible(gpus[1:]), stdout=load_log,
                                    stderr=subprocess.STDOUT, cwd=out / "load",
                                    start_new_session=True)
        # once its cells judge candidates (after their calibration), the GPUs are busy
        deadline = time.monotonic() + min(120.0, minutes * 60)
        while time.monotonic() < deadline and len(_recorded(
                [p for p in (out / "load").glob("sweeps/*/*") if (p / "evaluations").is_dir()]
        )) < 8:
            time.sleep(2)
        rc, _, text = _run(judge, visible([0]), out / "loaded.json.log",
                           min(report.left_s(), 240))
        times["others busy"] = _shape_times(text) if rc in (0, 1) else {}
        try:
            load.wait(max(report.left_s() - 60, 1))
        except subprocess.TimeoutExpired:
            os.killpg(load.pid, signal.SIGKILL)
        result["load"] = sweep_figures(_sweep_dir(log.read_text(errors="replace")))
    rc, _, text = _run(judge, visible([0]), out / "alone-2.json.log",
                       min(report.left_s(), 240))
    times["alone 2"] = _shape_times(text) if rc in (0, 1) else {}
    result["times_us"] = times
    result["differences"] = timing_differences(times)
    report.step("timing", result)


def timing_differences(times: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Per shape, how far each measurement is from the mean of the two alone (relative)."""
    alone = [times.get("alone 1", {}), times.get("alone 2", {})]
    shapes = sorted(set(alone[0]) & set(alone[1]))
    if not shapes:
        return {}
    mean = {s: (alone[0][s] + alone[1][s]) / 2 for s in shapes}
    out: dict[str, Any] = {"alone_vs_alone_max": max(
        abs(alone[0][s] - alone[1][s]) / mean[s] for s in shapes)}
    busy = times.get("others busy", {})
    if busy and set(shapes) <= set(busy):
        per_shape = {s: busy[s] / mean[s] - 1 for s in shapes}
        out["others_busy_vs_alone"] = {s: round(v, 4) for s, v in per_shape.items()}
        out["others_busy_vs_alone_max"] = max(abs(v) for v in per_shape.values())
        geo = 1.0
        for v in per_shape.values():
            geo *= 1 + v
        out["others_busy_vs_alone_geomean"] = geo ** (1 / len(per_shape)) - 1
    return out


def stream_kernel(out: Path) -> Path:
    from kernelswarm.agents.builtin.cuda_structures import STREAM

    path = out / "silu_and_mul_stream.cu"
    path.write_text(STREAM)
    return path


def tune_on(gpus: list[int], kernel: Path, trials: int, seed: int, out: Path, log: Path,
            limit_s: float) -> dict[str, Any]:
    command = [*CLI, "tune", "silu_and_mul", "--language", "cuda", "--kernel", str(kernel),
               "--trials", str(trials), "--set", f"run.out_dir={json.dumps(str(out))}",
               "--set", f"run.seed={seed}"]
    for knob, values in STREAM_KNOBS.items():
        command += ["--knob", f"{knob}={','.join(map(str, values))}"]
    rc, seconds, text = _run(command, visible(gpus), log, limit_s, cwd=out.parent)
    found = re.findall(r"^run folder: (\S+)$", text, re.MULTILINE)
    result: dict[str, Any] = {"gpus": len(gpus), "trials": trials, "rc": rc,
                              "wall_s": round(seconds, 1)}
    if found and (Path(found[-1]) / "summary.json").is_file():
        summary = json.loads((Path(found[-1]) / "summary.json").read_text())
        workers = summary.get("workers") or {}
        intervals = json.loads((Path(found[-1]) / "workers.json").read_text())["intervals"]
        evaluated = [i for i in intervals if i["kind"] == "evaluate"]
        result.update({
            "run_dir": found[-1], "evaluated": summary.get("evaluated_this_session"),
            "best": (summary.get("best") or {}).get("speedup_vs_start"),
            "workers": workers,
            # from the first trial's evaluation starting to the last one's verdict
            "trials_span_s": round(max(i["ended"] for i in evaluated)
                                   - min(i["began"] for i in evaluated), 2) if evaluated else None})
    return result


def step_tune(report: Report, out: Path, gpus: list[int], trials: int) -> None:
    kernel = stream_kernel(out)
    (out / "tune").mkdir(exist_ok=True)
    runs: dict[str, Any] = {"warm-up": tune_on(gpus, kernel, 2, 99, out / "tune",
                                               out / "tune-warm-up.log",
                                               min(report.left_s(), 240))}
    for n, seed in ((len(gpus), 1), (1, 2)):
        runs[str(n)] = tune_on(gpus[:n], kernel, trials, seed, out / "tune",
                               out / f"tune-{n}.log", min(report.left_s(), 300))
        one, many = runs.get("1", {}), runs.get(str(len(gpus)), {})
        for figure in ("wall_s", "trials_span_s"):
            if one.get(figure) and many.get(figure):
                runs[f"speedup_{figure}"] = round(one[figure] / many[figure], 3)
        report.step("tune", {"kernel": kernel.name, "knobs": STREAM_KNOBS, "runs": runs})


def _worker_pids() -> list[int]:
    done = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True)
    return [int(line.split()[0]) for line in done.stdout.splitlines()
            if "ray::EvalWorker" in line]


def _recorded(run_dirs: list[Path]) -> set[tuple[str, int, int]]:
    from kernelswarm.experiments.sinks import read_evaluations

    found = set()
    for run_dir in run_dirs:
        try:
            rows = read_evaluations(run_dir).select(["lineage", "step"]).to_pylist()
        except Exception:  # nothing written yet
            continue
        found |= {(run_dir.name, r["lineage"], r["step"]) for r in rows}
    return found


def step_fault(report: Report, out: Path, gpus: list[int], minutes: float) -> None:
    sweep_file = derived_sweep(out / "fault.toml", ["silu_and_mul"], ["cuda"], "fault")
    log = out / "fault.log"
    command = [*CLI, "sweep", str(sweep_file), "--set", f"search.wall_time_s={minutes * 60:g}"]
    (out / "fault").mkdir(exist_ok=True)
    killed: dict[str, Any] = {}

    def kill_one() -> None:
        deadline = time.monotonic() + minutes * 60
        while time.monotonic() < deadline:
            time.sleep(2)
            cells = [p for p in (out / "fault").glob("sweeps/*/*")
                     if (p / "evaluations").is_dir()]
            before = _recorded(cells)
            if len(before) >= 8 and _worker_pids():
                pid = _worker_pids()[0]
                os.kill(pid, signal.SIGKILL)
                killed.update({"pid": pid, "at": time.time(),
                               "recorded_before": sorted(map(list, before))})
                return

    killer = threading.Thread(target=kill_one, daemon=True)
    killer.start()
    rc, seconds, text = _run(command, visible(gpus), log,
                             min(report.left_s(), minutes * 60 + 180), cwd=out / "fault")
    killer.join(5)
    result: dict[str, Any] = {"rc": rc, "wall_s": round(seconds, 1), "killed": killed,
                              **sweep_figures(_sweep_dir(text))}
    if killed and "sweep_dir" in result:
        cells = [p for p in Path(result["sweep_dir"]).iterdir() if (p / "evaluations").is_dir()]
        after = _recorded(cells)
        before = {tuple(x) for x in killed["recorded_before"]}
        result["recorded_before_kill"] = len(before)
        result["recorded_at_end"] = len(after)
        result["lost"] = sorted(map(list, before - after))
        intervals = json.loads((Path(result["sweep_dir"]) / "workers.json").read_text()
                               )["intervals"]
        result["evaluations_after_kill_by_worker"] = {
            str(w): sum(1 for i in intervals if i["worker"] == w and i["kind"] == "evaluate"
                        and i["began"] > killed["at"]) for w in range(len(gpus))}
    report.step("fault", result)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", nargs="+", choices=STEPS, default=list(STEPS))
    parser.add_argument("--gpus", nargs="+", type=int, default=[4, 1, 2],
                        help="the GPU counts of the sweeps, in the order run (default 4 1 2)")
    parser.add_argument("--minutes", type=float, default=1.5,
                        help="each sweep's search.wall_time_s, in minutes (default 1.5)")
    parser.add_argument("--trials", type=int, default=80)
    parser.add_argument("--budget-s", type=float, default=560.0,
                        help="stop starting steps once this is spent (default 560)")
    args = parser.parse_args(argv)
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    report = Report(args.out, args.budget_s, list(argv if argv is not None else sys.argv[1:]))
    total = report.doc["gpus"]
    if total < 1:
        print("no GPU visible", file=sys.stderr)
        return 1
    every = list(range(total))
    counts = [n for n in args.gpus if n <= total]
    sampler = Sampler(args.out / "nvidia-smi.csv")
    try:
        for step in args.steps:
            if report.left_s() < 60:
                report.step(step, {"error": f"not run: {report.left_s():.0f} s of the budget left"})
                continue
            began = time.monotonic()
            print(f"[scaling] {step} ({report.left_s():.0f} s left)", flush=True)
            if step == "calibrate":
                step_calibrate(report, args.out, every)
            elif step == "sweeps":
                step_sweeps(report, args.out, counts, args.minutes, sampler)
            elif step == "timing":
                step_timing(report, args.out, every, args.minutes)
            elif step == "tune":
                step_tune(report, args.out, every, args.trials)
            elif step == "fault":
                step_fault(report, args.out, every, args.minutes)
            print(f"[scaling] {step} done in {time.monotonic() - began:.0f} s", flush=True)
    finally:
        sampler.stop()
        report.write()
    print(json.dumps(report.doc, indent=1, default=str)[-6000:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
