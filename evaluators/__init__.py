"""Evaluators: build candidates, run each in a runner process of its own, judge them here.

Two sides: evaluators/judge/ runs in the evaluator's process (build, references, verdicts, the
timing cross-check) and never runs candidate code; evaluators/runner/ runs only inside the
sandbox process (load, launch, time). The modules directly in this folder are shared by both or
used at build time. Only this package (and task files) import torch.
"""

from .judge.evaluator import SandboxEvaluator
from .judge.runner_process import SandboxError
from .settings import CACHE_ENV, EvaluatorSettings

__all__ = ["CACHE_ENV", "EvaluatorSettings", "SandboxError", "SandboxEvaluator"]
