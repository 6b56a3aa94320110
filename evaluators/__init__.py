"""Evaluators: build candidates, run them in a sandbox process, check and time them.

Only this package (and task files) import torch; it is imported lazily where kernels run.
"""

from .sandbox import SandboxError
from .sandbox_evaluator import SandboxEvaluator
from .settings import CACHE_ENV, EvaluatorSettings

__all__ = ["CACHE_ENV", "EvaluatorSettings", "SandboxError", "SandboxEvaluator"]
