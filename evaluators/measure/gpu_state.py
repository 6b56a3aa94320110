"""What NVML says about the GPU: clocks, temperature, power and why the clocks are held down.

Read in the sandbox after each shape is timed (``Evaluation.metrics["gpu_state"]``), so that a
slow result measured on a throttled GPU can be recognised as such. NVML (the ``nvidia-ml-py``
package, imported as ``pynvml``) is optional: where it is missing or refuses, the state says so
and timing goes on.
"""

from __future__ import annotations

import functools
from typing import Any

# nvmlClocksEventReason* bits (formerly ...ThrottleReason*), in the order NVML documents them.
THROTTLE_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)


def throttle_names(mask: int) -> list[str]:
    """The reasons set in an NVML clocks-event mask, by name."""
    return [name for bit, name in THROTTLE_REASONS if mask & bit]


@functools.lru_cache(maxsize=4)
def _handle(device_index: int) -> tuple[Any, Any] | str:
    """(pynvml, handle) for the torch device ``device_index``, or why there is none."""
    try:
        import pynvml
    except ImportError:
        return "pynvml is not installed (pip install nvidia-ml-py)"
    try:
        import torch

        pynvml.nvmlInit()
        props = torch.cuda.get_device_properties(device_index)
        uuid = str(getattr(props, "uuid", ""))
        for text in (uuid, f"GPU-{uuid}"):
            try:
                return pynvml, pynvml.nvmlDeviceGetHandleByUUID(text)
            except pynvml.NVMLError:
                continue
        bus = f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"
        return pynvml, pynvml.nvmlDeviceGetHandleByPciBusId(bus)
    except Exception as exc:  # noqa: BLE001 - NVML is a report, never a reason to fail
        return f"NVML unavailable: {type(exc).__name__}: {exc}"


def _read(call: Any, *args: Any) -> Any:
    try:
        return call(*args)
    except Exception:  # noqa: BLE001 - a field NVML does not support on this GPU
        return None


def gpu_state(device_index: int) -> dict[str, Any]:
    """Current SM and memory clocks, temperature, power, and active throttle reasons."""
    found = _handle(device_index)
    if isinstance(found, str):
        return {"nvml": found}
    nvml, handle = found
    reasons_call = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) \
        or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    mask = _read(reasons_call, handle)
    power = _read(nvml.nvmlDeviceGetPowerUsage, handle)
    state = {
        "sm_clock_mhz": _read(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM),
        "mem_clock_mhz": _read(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_MEM),
        "temperature_c": _read(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU),
        "power_w": None if power is None else power / 1000.0,
        "throttle_reasons": None if mask is None else throttle_names(int(mask)),
    }
    return state


def gpu_limits(device_index: int) -> dict[str, Any]:
    """The GPU's maximum clocks, power limit and driver: the context for ``gpu_state``."""
    found = _handle(device_index)
    if isinstance(found, str):
        return {"nvml": found}
    nvml, handle = found
    limit = _read(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    driver = _read(nvml.nvmlSystemGetDriverVersion)
    return {
        "sm_clock_max_mhz": _read(nvml.nvmlDeviceGetMaxClockInfo, handle, nvml.NVML_CLOCK_SM),
        "mem_clock_max_mhz": _read(nvml.nvmlDeviceGetMaxClockInfo, handle, nvml.NVML_CLOCK_MEM),
        "power_limit_w": None if limit is None else limit / 1000.0,
        "driver": driver.decode() if isinstance(driver, bytes) else driver,
    }
