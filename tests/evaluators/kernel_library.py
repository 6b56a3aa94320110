"""The adversarial kernels in kernels/ and the quick settings the tests evaluate them with."""

from __future__ import annotations

from pathlib import Path

from kernelswarm.evaluators import EvaluatorSettings

KERNELS = Path(__file__).parent / "kernels"
RUN_TIMEOUT_S = 3.0


def kernel_source(name: str) -> str:
    return (KERNELS / f"{name}.cpp").read_text()


def quick_settings(cache_dir: Path, **overrides) -> EvaluatorSettings:
    """Small timing budgets, no cache flush, and a 3 s run limit: fast, still every check."""
    values = dict(cache_dir=cache_dir, run_timeout_s=RUN_TIMEOUT_S, seeds=2, warmup=1,
                  min_repeats=10, max_repeats=40, timing_budget_s=0.05, flush_cache=False)
    values.update(overrides)
    return EvaluatorSettings(**values)
