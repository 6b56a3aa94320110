"""What the machine can do: its name, last-level cache, copy bandwidth and peak flops.

The sandbox measures bandwidth and flops once at start, and the roofline of every shape is taken
against these figures: ideal time = max(bytes / copy bandwidth, flops / peak flops).

- CPU: on one thread (candidates are single threaded): a copy beyond the last-level cache and a
  float32 matmul.
- CUDA GPU: with CUDA events, the median of several runs: a device-to-device copy of
  ``GPU_COPY_BYTES`` (bytes read plus written) and a bf16 matmul of ``GPU_MATMUL_N`` cubed on
  random data; the cache is the L2. The figures also carry what NVML says about the GPU (clocks,
  power limit, driver), the overhead of the timer's device-wide synchronize, and the launch floor:
the device time of the smallest kernel call replayed in a CUDA graph, which no timed call of a
candidate undercuts (evaluators/judge/figures.py ``own_floor_us``).
"""

from __future__ import annotations

import math
import platform
import re
import time
from pathlib import Path
from typing import Any

from ...search import MachineFigures  # the figures are a field of Evaluation

FALLBACK_LLC_BYTES = 64 * 1024 * 1024
GPU_COPY_BYTES = 1 << 30
GPU_MATMUL_N = 8192
_CACHE_SYSFS = Path("/sys/devices/system/cpu/cpu0/cache")
_SIZE = re.compile(r"(\d+)\s*([KMG]?)", re.I)


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (or what ``platform`` knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def describe_device(device: str) -> str:
    """A device in words for ``Evaluation.device``, e.g. 'cpu: Intel(R) Xeon(R) ...'."""
    return f"cpu: {cpu_model()}" if device == "cpu" else device


def last_level_cache_bytes(root: Path = _CACHE_SYSFS) -> int:
    """Size of the largest-level data cache of cpu0, or ``FALLBACK_LLC_BYTES`` if unknown."""
    best_level, best_size = -1, 0
    for index in sorted(root.glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            match = _SIZE.match((index / "size").read_text().strip())
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or match is None:
            continue
        size = int(match.group(1)) * 1024 ** " KMG".index(match.group(2).upper() or " ")
        if level > best_level or (level == best_level and size > best_size):
            best_level, best_size = level, size
    return best_size or FALLBACK_LLC_BYTES


def _best_seconds(fn, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _copy_bandwidth(nbytes: int, device: str) -> float:
    """Bytes read plus written per second by a copy of ``nbytes`` (best of three)."""
    import torch

    src = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    return 2 * src.numel() * src.element_size() / _best_seconds(lambda: dst.copy_(src), 3)


def _matmul_flops(device: str, n: int = 1024) -> float:
    """Float32 flops per second of an n x n matmul (best of three)."""
    import torch

    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    return 2 * n ** 3 / _best_seconds(lambda: torch.mm(a, b), 3)


def device_cache_bytes(device: str) -> int:
    """The cache a flush must evict: the GPU's L2 on ``cuda``, else the CPU's last level."""
    if device.startswith("cuda"):
        import torch

        return int(torch.cuda.get_device_properties(torch.device(device)).L2_cache_size)
    return last_level_cache_bytes()


def _event_median_s(fn: Any, repeats: int) -> float:
    """Median seconds of ``fn`` between CUDA events, after one untimed call."""
    import torch

    fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return sorted(times)[len(times) // 2]


def _gpu_copy_bandwidth(device: Any) -> float:
    """Bytes read plus written per second by a device-to-device copy of ``GPU_COPY_BYTES``."""
    import torch

    src = torch.randn(GPU_COPY_BYTES // 4, device=device)
    dst = torch.empty_like(src)
    return 2 * GPU_COPY_BYTES / _event_median_s(lambda: dst.copy_(src), 10)


def _gpu_matmul_flops(device: Any, n: int) -> float:
    """Flops per second of an n x n x n bf16 matmul on random data."""
    import torch

    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    return 2 * n ** 3 / _event_median_s(lambda: torch.mm(a, b), 10)


def _gpu_launch_floor_us(device: Any, calls: int = 200) -> float:
    """The device time per call of the smallest kernel (a one-element add) replayed ``calls``
    times in a CUDA graph: the fastest of five replays, in us."""
    import torch

    one = torch.zeros(1, device=device)
    one.add_(1.0)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            one.add_(1.0)
    graph.replay()
    best = math.inf
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) * 1e3 / calls)
    return best


def measure_gpu_machine(device: str, l2_bytes: int) -> MachineFigures:
    """Copy bandwidth, bf16 matmul throughput, NVML limits and timer overhead of a CUDA GPU."""
    import torch

    from .gpu_state import gpu_limits
    from .gpu_timing import timer_overhead_us

    dev = torch.device(device)
    bandwidth, flops = _gpu_copy_bandwidth(dev), _gpu_matmul_flops(dev, GPU_MATMUL_N)
    torch.cuda.empty_cache()
    props = torch.cuda.get_device_properties(dev)
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    name = (f"cuda: {props.name} (sm_{props.major}{props.minor}, {props.multi_processor_count} "
            f"SMs, {props.total_memory / 2 ** 30:.0f} GiB)")
    return MachineFigures(device=name, llc_bytes=l2_bytes, copy_bandwidth_gbs=bandwidth / 1e9,
                          peak_gflops=flops / 1e9, matmul=f"bf16 {GPU_MATMUL_N} cubed",
                          timer_overhead_us=timer_overhead_us(), gpu=gpu_limits(index),
                          launch_floor_us=_gpu_launch_floor_us(dev))


def measure_machine(device: str, llc_bytes: int) -> MachineFigures:
    """Measure copy bandwidth (a copy well beyond the cache) and matmul flops on ``device``."""
    if device.startswith("cuda"):
        return measure_gpu_machine(device, llc_bytes)
    bandwidth = _copy_bandwidth(max(2 * llc_bytes, FALLBACK_LLC_BYTES), device)
    return MachineFigures(device=describe_device(device), llc_bytes=llc_bytes,
                          copy_bandwidth_gbs=bandwidth / 1e9,
                          peak_gflops=_matmul_flops(device) / 1e9)
