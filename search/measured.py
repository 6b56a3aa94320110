"""What an evaluation measured besides its verdict, typed: the machine, where the baselines came
from, what the kernel uses, what the profilers saw, where the evaluation's time went.

The evaluator (evaluators/judge/evaluator.py) fills these; agents, the archive and the
experiments read them as fields of ``Evaluation``, never by key. Each type's ``parse`` reads
its stored form (search/stored_form.py places it in the stored resources/metrics maps). Values
come from a process that ran candidate code: parsing keeps what has the right type and drops
the rest, never raising.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class MachineFigures:
    """The machine's measured limits, the roofline's denominators (evaluators/measure/machine.py)."""

    device: str
    llc_bytes: int
    copy_bandwidth_gbs: float  # bytes read + written per second, / 1e9
    peak_gflops: float  # float32 matmul on one CPU thread; bf16 matmul on a GPU
    matmul: str = "float32, one thread"
    timer_overhead_us: float = math.nan  # GPU: an empty events sample with its synchronize
    gpu: dict[str, Any] = field(default_factory=dict)  # NVML: clocks, power limit, driver
    # GPU: the device time of the smallest kernel call, replayed in a CUDA graph (us)
    launch_floor_us: float = math.nan

    def ideal_seconds(self, moved_bytes: float, flops: float) -> float:
        return max(moved_bytes / (self.copy_bandwidth_gbs * 1e9), flops / (self.peak_gflops * 1e9))

    def as_metrics(self) -> dict[str, float | int | str]:
        """The stored form; the launch floor (added later) only where it was measured, so
        that a record of an older version reads back as it was written."""
        figures = asdict(self)
        if not math.isfinite(self.launch_floor_us):
            del figures["launch_floor_us"]
        return figures

    @classmethod
    def parse(cls, figures: Mapping[str, Any]) -> MachineFigures | None:
        """From the stored form (``as_metrics``); None without a copy bandwidth."""
        if _number(figures.get("copy_bandwidth_gbs"), None) is None:
            return None
        gpu = figures.get("gpu")
        return cls(device=str(figures.get("device", "")),
                   llc_bytes=int(_number(figures.get("llc_bytes"), 0)),
                   copy_bandwidth_gbs=float(figures["copy_bandwidth_gbs"]),
                   peak_gflops=float(_number(figures.get("peak_gflops"))),
                   matmul=str(figures.get("matmul", "")),
                   timer_overhead_us=float(_number(figures.get("timer_overhead_us"))),
                   gpu=dict(gpu) if isinstance(gpu, Mapping) else {},
                   launch_floor_us=float(_number(figures.get("launch_floor_us"))))


@dataclass(frozen=True)
class BaselineSource:
    """Where the baselines' times came from (evaluators/baselines/baselines.py): the table's device and
    cache key, whether it was read from the cache, the baselines skipped (name -> why) and the
    libraries' versions; or ``error``, why none were measured."""

    device: str = ""
    key: str = ""
    cached: bool = False
    skipped: Mapping[str, str] = field(default_factory=dict)
    versions: Mapping[str, str] = field(default_factory=dict)
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        """As ``summary.json`` shows it: the table's description, or ``{"error": why}``."""
        if self.error:
            return {"error": self.error}
        return {"device": self.device, "key": self.key, "cached": self.cached,
                "skipped": dict(self.skipped), "versions": dict(self.versions)}

    @classmethod
    def parse(cls, table: Any, error: Any = None) -> BaselineSource | None:
        """From ``as_dict``'s table and the error; None when neither is there."""
        if error:
            return cls(error=str(error))
        if not isinstance(table, Mapping):
            return None
        return cls(device=str(table.get("device", "")), key=str(table.get("key", "")),
                   cached=bool(table.get("cached", False)), skipped=strings(table.get("skipped")),
                   versions=strings(table.get("versions")))


_KNOWN_ATTRIBUTES = ("registers", "static_shared_bytes", "local_bytes_per_thread",
                     "spill_store_bytes", "spill_load_bytes")


@dataclass(frozen=True)
class KernelResources:
    """What one compiled kernel uses, as the compiler and the driver report it (CUDA); None
    where not reported. ``other``: the remaining attributes (e.g. ``const_bytes``)."""

    kernel: str
    registers: int | None = None  # per thread
    static_shared_bytes: int | None = None
    local_bytes_per_thread: int | None = None
    spill_store_bytes: int | None = None
    spill_load_bytes: int | None = None
    other: Mapping[str, int] = field(default_factory=dict)

    @property
    def spill_bytes(self) -> int | None:
        """Bytes spilled to local memory (stores plus loads); None where not reported."""
        if self.spill_store_bytes is None and self.spill_load_bytes is None:
            return None
        return (self.spill_store_bytes or 0) + (self.spill_load_bytes or 0)

    def as_dict(self) -> dict[str, int]:
        known = {k: getattr(self, k) for k in _KNOWN_ATTRIBUTES if getattr(self, k) is not None}
        return {**self.other, **known}


def kernel_resources(kernels: Any) -> tuple[KernelResources, ...]:
    """``{kernel name: {attribute: int}}`` (the runner's report) as ``KernelResources``."""
    if not isinstance(kernels, Mapping):
        return ()
    found = []
    for name, attributes in kernels.items():
        if not isinstance(attributes, Mapping):
            continue
        ints = {str(k): v for k, v in attributes.items() if _is_int(v)}
        found.append(KernelResources(
            str(name), **{k: ints.pop(k) for k in _KNOWN_ATTRIBUTES if k in ints}, other=ints))
    return tuple(found)


@dataclass(frozen=True)
class KernelTime:
    """One kernel a call launched, under ``torch.profiler``: launches and total device time."""

    kernel: str
    calls: int
    device_us: float


NCU_COUNTERS = ("time_us", "dram_throughput_pct", "memory_throughput_pct", "sm_throughput_pct",
                "achieved_occupancy_pct", "l2_hit_rate_pct")


@dataclass(frozen=True)
class NcuKernel:
    """Nsight Compute's counters of one kernel (evaluators/measure/profiling.py); None where this ncu
    has no such metric. ``top_stalls``: (reason, cycles per issue), worst first."""

    kernel: str
    time_us: float | None = None
    dram_throughput_pct: float | None = None
    memory_throughput_pct: float | None = None
    sm_throughput_pct: float | None = None
    achieved_occupancy_pct: float | None = None
    l2_hit_rate_pct: float | None = None
    top_stalls: tuple[tuple[str, float], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {**{k: getattr(self, k) for k in NCU_COUNTERS},
                "top_stalls": [{"reason": r, "cycles_per_issue": c} for r, c in self.top_stalls]}


@dataclass(frozen=True)
class Profile:
    """What the profilers saw of a candidate after timing (GPU only): per tuning shape, the
    kernels one call launched (``launches``; empty with ``EvaluatorSettings.profile_kernels``
    off), and Nsight Compute's counters on ``ncu_shape`` (``ncu``; ``ncu_error`` says why there
    are none when it was on and failed)."""

    launches: Mapping[str, tuple[KernelTime, ...]] = field(default_factory=dict)
    ncu_shape: str = ""
    ncu: tuple[NcuKernel, ...] = ()
    ncu_error: str = ""

    @classmethod
    def parse(cls, launches: Any = None, ncu: Any = None) -> Profile | None:
        """From the stored form (``{shape: [{kernel, calls, device_us}]}`` and
        ``{"shape", "kernels": {name: counters}}`` or ``{"shape", "error"}``); None if empty."""
        per_shape: dict[str, tuple[KernelTime, ...]] = {}
        if isinstance(launches, Mapping):
            for shape, rows in launches.items():
                if isinstance(rows, list):
                    per_shape[str(shape)] = tuple(_kernel_time(r) for r in rows
                                                  if isinstance(r, Mapping))
        ncu = ncu if isinstance(ncu, Mapping) else {}
        counted = ncu.get("kernels")
        kernels = tuple(_ncu_kernel(str(k), v) for k, v in counted.items()
                        if isinstance(v, Mapping)) if isinstance(counted, Mapping) else ()
        if not per_shape and not ncu:
            return None
        return cls(per_shape, str(ncu.get("shape", "")), kernels, str(ncu.get("error", "")))

    def stored_launches(self) -> dict[str, list[dict[str, Any]]]:
        return {shape: [asdict(k) for k in rows] for shape, rows in self.launches.items()}

    def stored_ncu(self) -> dict[str, Any]:
        if self.ncu_error:
            return {"shape": self.ncu_shape, "error": self.ncu_error}
        return {"shape": self.ncu_shape, "kernels": {k.kernel: k.as_dict() for k in self.ncu}}


@dataclass(frozen=True)
class EvaluationCost:
    """Where an evaluation's wall time went, for the evaluator's benchmarks: seconds per phase
    (``runner_wait``, ``correctness``, ``spare_wait``, ``timing``, ``profiling``), per request
    type to the runner, the runner's start-up, how it started and where its shared buffers
    live (``arena``).

    ``runner_s``: what the runner says its timing steps spent, summed over the shapes (making
    copies, warm-up calls, graph capture, memory handed back): observations of a process that
    ran candidate code, for diagnosis only. ``build_wait_s``: the seconds this evaluation
    waited for a build, the build the judge made because none was ready (a compile pool
    builds ahead) plus what the runner reported compiling at the kernel's first calls (a JIT
    whose code was not built ahead); ``jit_compiles``: how many kernels the runner compiled."""

    phase_s: Mapping[str, float] = field(default_factory=dict)
    request_s: Mapping[str, float] = field(default_factory=dict)
    runner_start_s: float = math.nan
    runner_started_as: str = ""
    arena: str = ""
    runner_s: Mapping[str, float] = field(default_factory=dict)
    build_wait_s: float = 0.0
    jit_compiles: int = 0

    @classmethod
    def parse(cls, figures: Mapping[str, Any]) -> EvaluationCost:
        compiles = figures.get("jit_compiles")
        return cls(phase_s=_seconds(figures.get("phase_s")),
                   request_s=_seconds(figures.get("request_s")),
                   runner_start_s=float(_number(figures.get("runner_start_s"))),
                   runner_started_as=str(figures.get("runner_started_as") or ""),
                   arena=str(figures.get("arena") or ""),
                   runner_s=_seconds(figures.get("runner_s")),
                   build_wait_s=float(_number(figures.get("build_wait_s"), 0.0) or 0.0),
                   jit_compiles=compiles if _is_int(compiles) else 0)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any, default: float | None = math.nan) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return default


def strings(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


def _seconds(value: Any) -> dict[str, float]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): float(v) for k, v in value.items() if _number(v, None) is not None}


def _kernel_time(row: Mapping[str, Any]) -> KernelTime:
    calls = row.get("calls")
    return KernelTime(str(row.get("kernel", "")), calls if _is_int(calls) else 0,
                      _number(row.get("device_us")))


def _ncu_kernel(name: str, counters: Mapping[str, Any]) -> NcuKernel:
    stalls = counters.get("top_stalls")
    top = tuple((str(s.get("reason", "")), float(_number(s.get("cycles_per_issue"))))
                for s in stalls if isinstance(s, Mapping)) if isinstance(stalls, list) else ()
    return NcuKernel(name, **{k: _number(counters.get(k), None) for k in NCU_COUNTERS},
                     top_stalls=top)


