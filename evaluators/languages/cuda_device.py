"""The GPU's figures as its driver reports them, for launchers that size grids to the machine.

A launcher that assumes a machine (132 SMs, 50 MB of L2) is right on one GPU and wrong on the
next; these are read from the device the kernel runs on, once per device and process, through
the CUDA driver (``cuDeviceGetAttribute``). A task's ``launch_cuda`` reads them as
``fn.device`` (evaluators/languages/cuda_module.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

# field -> the driver's CU_DEVICE_ATTRIBUTE_<name>
_ATTRIBUTES = {
    "sm_count": "MULTIPROCESSOR_COUNT",
    "l2_bytes": "L2_CACHE_SIZE",
    "max_threads_per_sm": "MAX_THREADS_PER_MULTIPROCESSOR",
    "shared_bytes_per_sm": "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
    "registers_per_sm": "MAX_REGISTERS_PER_MULTIPROCESSOR",
    "warp_size": "WARP_SIZE",
}


@dataclass(frozen=True)
class DeviceFigures:
    """What a launcher sizes a grid by: multiprocessors, L2, and per-SM limits."""

    ordinal: int
    sm_count: int
    l2_bytes: int
    max_threads_per_sm: int
    shared_bytes_per_sm: int
    registers_per_sm: int
    warp_size: int

    def blocks_per_sm(self, threads: int, registers_per_thread: int = 0,
                      shared_bytes: int = 0) -> int:
        """Resident blocks of ``threads`` threads per SM, as far as threads, registers and
        shared memory allow (at least 1)."""
        limits = [self.max_threads_per_sm // max(threads, 1)]
        if registers_per_thread > 0:
            limits.append(self.registers_per_sm // (registers_per_thread * max(threads, 1)))
        if shared_bytes > 0:
            limits.append(self.shared_bytes_per_sm // shared_bytes)
        return max(1, min(limits))


def _read(driver: Any, handle: Any, name: str) -> int:
    kind = getattr(driver.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
    err, value = driver.cuDeviceGetAttribute(kind, handle)
    if int(err) != 0:
        raise RuntimeError(f"the CUDA driver did not report {name} (error {int(err)})")
    return int(value)


@functools.lru_cache(maxsize=16)
def device_figures(ordinal: int) -> DeviceFigures:
    """The figures of GPU ``ordinal``, from the driver (cached for the process)."""
    from cuda.bindings import driver

    err, handle = driver.cuDeviceGet(ordinal)
    if int(err) != 0:
        raise RuntimeError(f"the CUDA driver has no device {ordinal} (error {int(err)})")
    values = {field: _read(driver, handle, name) for field, name in _ATTRIBUTES.items()}
    return DeviceFigures(ordinal=ordinal, **values)
