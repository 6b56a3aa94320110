"""Settings of one evaluator: how hard it checks, how long it measures, what it profiles."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CACHE_ENV = "KERNELSWARM_CACHE"


def default_cache_dir() -> Path:
    """``$KERNELSWARM_CACHE`` if set, else ``~/.cache/kernelswarm/compile``."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser()
    return Path.home() / ".cache" / "kernelswarm" / "compile"


@dataclass(frozen=True)
class EvaluatorSettings:
    """Frozen settings of a ``SandboxEvaluator``; invalid values raise ``ValueError`` naming the field.

    ``run_timeout_s`` bounds the whole run phase of one evaluation in the sandbox (correctness,
    held-out shapes and timing together), plus an allowance for the bytes the protocol moves
    (evaluators/judge/deadlines.py: under a second for small problems, minutes for a
    KernelBench-size one); ``timing_budget_s`` is the soft budget of timing one
    shape (at least ``min_repeats`` rounds are always measured). ``memory_limit_mb`` caps the
    sandbox's address space (``RLIMIT_AS``), which includes torch itself: leave room for a few GB;
    it must stay None on ``cuda``, whose driver maps the GPU's memory into the address space.

    ``extra_checks`` are correctness checks beyond the task's shapes (a tester's: sizes 1, odd,
    large magnitudes): each ``{"shape": {dim: value}, "scale": s, "reason": why}`` is checked
    like a held-out shape, with every floating input multiplied by ``s``; never timed.

    GPU only (``device`` "cuda" or "cuda:N"):

    - ``cuda_arch``: the target of ``cuda`` kernels ("sm_90", "sm_90a", "90" or "9.0"); None
      detects it with ``nvidia-smi --query-gpu=compute_cap`` (the first GPU of the machine
      building). Builds never touch a GPU, so a compile pool on a machine without one needs it set.
    - ``cuda_graph_below_us``: a kernel faster than this is timed by replaying a CUDA graph of
      many calls (launch overhead and the device-wide synchronize amortised over ~4 ms); slower
      ones are timed call by call with CUDA events and an L2 flush before each call. The
      synchronize's host round trip, which every events sample carries, was 13-22 us on a
      virtualised H100 (``Evaluation.machine.timer_overhead_us``), hence the high default.
    - ``profile_kernels``: after timing, one call per tuning shape under ``torch.profiler``
      (kernel names and device times in ``Evaluation.profile.launches``).
    - ``ncu``: also run Nsight Compute on the largest tuning shape (DRAM/SM throughput, occupancy,
      L2 hit rate, top stall reasons), in a child process limited to ``ncu_timeout_s`` that counts
      against ``run_timeout_s``: raise that too when turning it on.
    """

    device: str = "cpu"
    cache_dir: Path = field(default_factory=default_cache_dir)
    compile_timeout_s: float = 60.0
    run_timeout_s: float = 30.0
    seeds: int = 3
    check_heldout: bool = True
    warmup: int = 3
    min_repeats: int = 10
    max_repeats: int = 200
    target_rel_se: float = 0.005
    timing_budget_s: float = 1.0
    flush_cache: bool = True
    memory_limit_mb: int | None = None
    cuda_arch: str | None = None
    cuda_graph_below_us: float = 1000.0
    profile_kernels: bool = True
    ncu: bool = False
    ncu_timeout_s: float = 120.0
    extra_checks: tuple[dict[str, Any], ...] = ()  # {"shape": {...}, "scale": float, "reason"}

    def __post_init__(self) -> None:
        if not isinstance(self.device, str) or not self.device:
            raise ValueError(f"EvaluatorSettings.device must be a device name such as 'cpu', "
                             f"got {self.device!r}")
        object.__setattr__(self, "cache_dir", Path(self.cache_dir).expanduser())
        for name in ("compile_timeout_s", "run_timeout_s", "timing_budget_s", "target_rel_se",
                     "cuda_graph_below_us", "ncu_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value <= 0:
                raise ValueError(f"EvaluatorSettings.{name} must be a positive number, got {value!r}")
        for name, low in (("seeds", 1), ("warmup", 0), ("min_repeats", 1), ("max_repeats", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"EvaluatorSettings.{name} must be an integer >= {low}, "
                                 f"got {value!r}")
        if self.max_repeats < self.min_repeats:
            raise ValueError(f"EvaluatorSettings.max_repeats ({self.max_repeats}) must be >= "
                             f"min_repeats ({self.min_repeats})")
        for name in ("check_heldout", "flush_cache", "profile_kernels", "ncu"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"EvaluatorSettings.{name} must be True or False, "
                                 f"got {getattr(self, name)!r}")
        limit = self.memory_limit_mb
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 256):
            raise ValueError(f"EvaluatorSettings.memory_limit_mb must be None or an integer "
                             f">= 256 (the sandbox holds torch), got {limit!r}")
        if limit is not None and self.device.startswith("cuda"):
            raise ValueError("EvaluatorSettings.memory_limit_mb must be None on a cuda device: "
                             "the CUDA driver maps the GPU's memory into the address space, so "
                             "an address-space cap breaks it")
        if self.cuda_arch is not None:
            object.__setattr__(self, "cuda_arch", normalize_cuda_arch(self.cuda_arch))
        object.__setattr__(self, "extra_checks", tuple(_extra_check(c) for c in self.extra_checks))

    def builds_ahead(self, language: str) -> bool:
        """Whether candidates in ``language`` get device code built before their evaluation
        (evaluators/judge/prebuild.py): Triton kernels on a GPU."""
        return language == "triton" and self.device.startswith("cuda")


def _extra_check(check: object) -> dict[str, Any]:
    """One extra check as a plain dict (it travels to the sandbox as JSON)."""
    shape = check.get("shape") if isinstance(check, Mapping) else None
    scale = check.get("scale", 1.0) if isinstance(check, Mapping) else None
    if not isinstance(shape, Mapping) or not shape or isinstance(scale, bool) \
            or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"EvaluatorSettings.extra_checks: each check is {{'shape': {{dim: "
                         f"value, ...}}, 'scale': a positive number}}, got {check!r}")
    return {"shape": {str(k): v for k, v in shape.items()}, "scale": float(scale),
            "reason": str(check.get("reason", ""))}


_ARCH = re.compile(r"(?:sm_|compute_)?(\d{1,2}?)\.?(\d)([af]?)\Z")


def normalize_cuda_arch(value: object) -> str:
    """``"sm_90"`` from "sm_90", "90", "9.0" (and "sm_90a" from "sm_90a"); ``ValueError`` else."""
    match = _ARCH.match(str(value).strip()) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"EvaluatorSettings.cuda_arch must be a compute capability such as "
                         f"'sm_90', 'sm_90a', '90' or '9.0', got {value!r}")
    major, minor, suffix = match.groups()
    return f"sm_{major}{minor}{suffix}"
