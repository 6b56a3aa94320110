"""The process Nsight Compute profiles: ``python -m kernelswarm.evaluators.measure.ncu_target JSON``.

Started by ``profiling.ncu_profile`` from the sandbox (so with the sandbox's scrubbed
environment). The JSON names the task, the language, the built artifact, its entry and spec, one
shape and the evaluator settings; the process loads them, makes the shape's inputs and calls the
candidate once through the task's launcher, then exits. It prints nothing: ncu's report is the
only output on stdout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    import torch

    from ...search import load_task
    from ..languages import get_language
    from ..settings import EvaluatorSettings

    target = json.loads((argv if argv is not None else sys.argv[1:])[0])
    settings = EvaluatorSettings(**target["settings"])
    task = load_task(target["task"], settings.device.split(":")[0])
    language = get_language(target["language"], settings)
    kernel = language.load(Path(target["artifact"]), target["entry"], target["spec"])
    shape = target["shape"]
    inputs = tuple(task.module.make_inputs(shape, 0, settings.device))
    outputs = tuple(task.module.make_outputs(shape, settings.device))
    fn = language.for_shape(kernel, shape)
    getattr(task.module, language.launcher)(fn, inputs, outputs, shape)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
