"""Evaluators: build candidates, run each in a runner process of its own, judge them here.

Two sides: evaluators/judge/ runs in the evaluator's process (build, references, verdicts, the
timing cross-check) and never runs candidate code; evaluators/runner/ runs only inside the
sandbox process (load, launch, time). Below both, one concern a room, lowest first: the modules
directly in this folder (settings, the judge's and runner's protocol and channel, correctness,
the environment candidate code sees), sandbox/, languages/, measure/, inductor/, baselines/,
starts/; a room imports its own and those below it (``ROOMS`` in tests/test_layering.py). Only
this package (and task files) import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from .settings import CACHE_ENV, EvaluatorSettings, default_cache_dir

# What the layers above use, by the module that defines it: imported on first use, not with the
# package. Every runner process imports this package first, and must not load (or pay ~0.6 s of
# CPU for) the judge's side.
_LAZY = {
    "SandboxEvaluator": "judge.evaluator",
    "SandboxBuilder": "judge.builder",  # builds as SandboxEvaluator does, without torch
    "SandboxError": "judge.runner_process",
    "start_runner_template": "judge.runner_process",
    "roofline_bound": "judge.figures",
    "TIMING_FILE": "measure.timing_protocol",
    "TimingSettings": "measure.timing_protocol",
    "structure_problem": "correctness",
    "is_secret_name": "environment",
    "GenerationError": "inductor.inductor_code",
    "generate_start": "inductor.inductor_start",
    "device_name": "baselines.baselines",
    "software_versions": "baselines.baseline_timing",
    "compile_start": "starts.generated_starts",
}

__all__ = ["CACHE_ENV", "EvaluatorSettings", "default_cache_dir", *_LAZY]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
