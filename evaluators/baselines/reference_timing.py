"""Timing a built kernel with ``triton.testing.do_bench``: an outside yardstick for our medians.

Used by the evaluator benchmark (benchmarks/evaluator.py) to check that the sandbox's
medians agree with a widely used timer on the same kernel and shapes. It runs in the calling
process, which must see a GPU; candidate code runs here, so use it only on trusted kernels.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...search import load_task
from ..languages import get_language
from ..settings import EvaluatorSettings


def do_bench_medians(task_path: Path | str, language_name: str, settings: EvaluatorSettings,
                     artifact: Path, entry: str, spec: dict[str, Any],
                     rep_ms: int = 200) -> dict[str, float]:
    """Per tuning shape, ``do_bench``'s median time of one launch, in microseconds."""
    import torch
    from triton.testing import do_bench

    task = load_task(task_path, settings.device.split(":")[0])
    language = get_language(language_name, settings)
    kernel = language.load(Path(artifact), entry, spec)
    launch = getattr(task.module, language.launcher)
    medians: dict[str, float] = {}
    try:
        for shape in task.tuning_shapes:
            params = dict(shape)
            inputs = tuple(task.module.make_inputs(params, 0, settings.device))
            outputs = tuple(task.module.make_outputs(params, settings.device))
            fn = language.for_shape(kernel, shape)  # a dispatch kernel: this shape's route
            ms = do_bench(lambda i=inputs, o=outputs, p=params, f=fn: launch(f, i, o, p),
                          warmup=25, rep=rep_ms, return_mode="median")
            medians[shape.label] = float(ms) * 1e3
        torch.cuda.synchronize()
    finally:
        language.unload(kernel)
    return medians
