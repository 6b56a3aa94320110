"""What the machine can do: its name, last-level cache, copy bandwidth and peak flops.

The sandbox measures bandwidth and flops once at start on one thread (candidates are single
threaded), and the roofline of every shape is taken against these figures:
ideal time = max(bytes / copy bandwidth, flops / peak flops).
"""

from __future__ import annotations

import platform
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

FALLBACK_LLC_BYTES = 64 * 1024 * 1024
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


@dataclass(frozen=True)
class MachineFigures:
    """The machine's measured limits, as reported in ``Evaluation.metrics``."""

    device: str
    llc_bytes: int
    copy_bandwidth_gbs: float  # bytes read + written per second, / 1e9
    peak_gflops: float  # float32 matmul, one thread

    def ideal_seconds(self, moved_bytes: float, flops: float) -> float:
        return max(moved_bytes / (self.copy_bandwidth_gbs * 1e9), flops / (self.peak_gflops * 1e9))

    def as_metrics(self) -> dict[str, float | int | str]:
        return asdict(self)


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


def measure_machine(device: str, llc_bytes: int) -> MachineFigures:
    """Measure copy bandwidth (a copy well beyond the cache) and matmul flops on ``device``."""
    bandwidth = _copy_bandwidth(max(2 * llc_bytes, FALLBACK_LLC_BYTES), device)
    return MachineFigures(device=describe_device(device), llc_bytes=llc_bytes,
                          copy_bandwidth_gbs=bandwidth / 1e9,
                          peak_gflops=_matmul_flops(device) / 1e9)
