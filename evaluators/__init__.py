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

from typing import Any

from .settings import CACHE_ENV, EvaluatorSettings

__all__ = ["CACHE_ENV", "EvaluatorSettings", "SandboxBuilder", "SandboxError", "SandboxEvaluator"]


def __getattr__(name: str) -> Any:
    # The judge is imported on first use, not with the package: every runner process imports
    # this package first, and must not load (or pay ~0.6 s of CPU for) the judge's side.
    if name == "SandboxEvaluator":
        from .judge.evaluator import SandboxEvaluator

        return SandboxEvaluator
    if name == "SandboxBuilder":  # builds as SandboxEvaluator does, without torch
        from .judge.builder import SandboxBuilder

        return SandboxBuilder
    if name == "SandboxError":
        from .judge.runner_process import SandboxError

        return SandboxError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
