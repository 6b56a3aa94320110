"""Profiles fed back to the agents: kernels and device times (torch.profiler), Nsight Compute.

Both run after timing, never during it (a profiler changes what it measures):

- ``kernel_profile``: one call under ``torch.profiler`` (CUDA activity only): which kernels the
  launcher ran, how often, and their device time. Cheap once the profiler is up, so it is on by
  default (``EvaluatorSettings.profile_kernels``).
- ``ncu_profile``: one call of the candidate in a child process under ``ncu`` (off by default:
  several seconds per candidate): DRAM and SM throughput as % of peak, achieved occupancy, L2
  hit rate and the top warp stall reasons of each of the candidate's kernels. The child is
  ``python -m kernelswarm.evaluators.measure.ncu_target``; ``ncu`` runs with ``--clock-control none``
  so that it leaves the GPU's clocks as they are.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

NCU_SECTIONS = ("SpeedOfLight", "Occupancy", "MemoryWorkloadAnalysis", "WarpStateStats")
# Our name -> ncu's metric names, first found wins (names differ between ncu versions).
NCU_METRICS: dict[str, tuple[str, ...]] = {
    "time_us": ("gpu__time_duration.sum",),
    "dram_throughput_pct": ("dram__throughput.avg.pct_of_peak_sustained_elapsed",
                            "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"),
    "memory_throughput_pct": ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",),
    "sm_throughput_pct": ("sm__throughput.avg.pct_of_peak_sustained_elapsed",),
    "achieved_occupancy_pct": ("sm__warps_active.avg.pct_of_peak_sustained_active",),
    "l2_hit_rate_pct": ("lts__t_sector_hit_rate.pct",),
}
_STALL = re.compile(r"smsp__average_warps?_issue_stalled_(\w+?)_per_issue_active\.ratio$")
_TOP_STALLS = 4
_MAX_KERNELS = 8


def _device_time_us(event: Any) -> float:
    for name in ("self_device_time_total", "self_cuda_time_total", "device_time_total",
                 "cuda_time_total"):
        value = getattr(event, name, None)
        if value is not None:
            return float(value)
    return 0.0


def kernel_profile(run: Callable[[], None]) -> list[dict[str, Any]]:
    """The kernels ``run`` launches: name, launches and total device time (us), slowest first."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    rows = []
    for entry in prof.key_averages():
        device_us = _device_time_us(entry)
        if device_us > 0:
            rows.append({"kernel": entry.key[:200], "calls": int(entry.count),
                         "device_us": round(device_us, 3)})
    rows.sort(key=lambda r: -r["device_us"])
    return rows[:_MAX_KERNELS]


def ncu_available() -> str | None:
    """The path of ``ncu``, or None (looked up on PATH and in CUDA_HOME/bin)."""
    found = shutil.which("ncu")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if root and os.access(os.path.join(root, "bin", "ncu"), os.X_OK):
            return os.path.join(root, "bin", "ncu")
    return None


def parse_ncu_csv(text: str) -> dict[str, dict[str, Any]]:
    """Per kernel name, the ``NCU_METRICS`` and top stall reasons of ncu's raw CSV page."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if len(rows) < 3:
        return {}
    header, units, data = rows[0], rows[1], rows[2:]
    column = {name: i for i, name in enumerate(header)}
    found: dict[str, dict[str, Any]] = {}
    for row in data:
        name = row[column["Kernel Name"]] if "Kernel Name" in column else "?"
        if name in found or len(found) >= _MAX_KERNELS:
            continue
        metrics: dict[str, Any] = {}
        for key, names in NCU_METRICS.items():
            metric = next((n for n in names if n in column), None)
            if metric is None:
                continue
            value = _number(row[column[metric]])
            if key == "time_us" and value is not None:
                value = _to_us(value, units[column[metric]])
            metrics[key] = value
        stalls = []
        for metric, i in column.items():
            match = _STALL.match(metric)
            value = _number(row[i]) if match else None
            if match and value:
                stalls.append((match.group(1), value))
        stalls.sort(key=lambda s: -s[1])
        metrics["top_stalls"] = [{"reason": r, "cycles_per_issue": round(v, 3)}
                                 for r, v in stalls[:_TOP_STALLS]]
        found[name] = metrics
    return found


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def _to_us(value: float, unit: str) -> float:
    scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3,
             "ms": 1e3, "second": 1e6, "s": 1e6}
    return value * scale.get(unit.strip().lower(), 1.0)


def ncu_profile(target: Mapping[str, Any], kernels: Sequence[str], timeout_s: float,
                env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run ``ncu`` on one call of the candidate described by ``target`` (see ncu_target.py).

    Returns ``{"kernels": {name: metrics}}`` or ``{"error": why}``; never raises for ncu's sake.
    """
    ncu = ncu_available()
    if ncu is None:
        return {"error": "ncu is not installed (Nsight Compute); turn EvaluatorSettings.ncu off"}
    names = "|".join(re.escape(k) for k in kernels) or ".*"
    argv = [ncu, "--csv", "--page", "raw", "--clock-control", "none", "--launch-count",
            str(_MAX_KERNELS), "--kernel-name", f"regex:^({names})$",
            *[arg for section in NCU_SECTIONS for arg in ("--section", section)],
            sys.executable, "-m", "kernelswarm.evaluators.measure.ncu_target", json.dumps(dict(target))]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                              env=dict(env) if env is not None else None)
    except subprocess.TimeoutExpired:
        return {"error": f"ncu ran past ncu_timeout_s={timeout_s:g} s"}
    found = parse_ncu_csv(done.stdout)
    if not found:
        tail = (done.stderr or done.stdout)[-600:].strip()
        return {"error": f"ncu produced no metrics (exit status {done.returncode}): {tail}"}
    return {"kernels": found}
