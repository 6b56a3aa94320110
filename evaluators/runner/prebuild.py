"""A candidate's device code built ahead of its evaluation, in a sandbox with no device.

    python -m kernelswarm.evaluators.runner.prebuild REQUEST.json

Started by the judge's side (evaluators/judge/prebuild.py) in the runner's OS isolation
(namespaces through the same launcher, then ``enter_isolation`` with processes allowed: Triton
runs ptxas and a C compiler), with ``CUDA_VISIBLE_DEVICES`` empty and ``TRITON_CACHE_DIR`` in
its scratch folder, the only folder it can write. It loads the task and the candidate as a
runner does, compiles what the candidate's entry point launches on each shape for the request's
target (evaluators/languages/triton_aot.py), writes ``report.json`` beside the request and
exits. It runs candidate code: what it leaves in its cache folder serves this candidate's own
runner only.

Request: {task, language, settings, artifact, entry, spec, shapes, capability, workers}: the
shapes are compiled by ``workers`` forked copies of the process side by side.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
from pathlib import Path

from .limits import apply_limits

REPORT = "report.json"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    request_path = Path(argv[0]).resolve()
    request = json.loads(request_path.read_text())
    apply_limits(None)
    faulthandler.enable(all_threads=False)
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # no device, whatever the caller's environment

    from ...search import load_task
    from ..languages import get_language, triton_aot
    from ..sandbox.isolation import enter_isolation
    from ..settings import EvaluatorSettings

    settings = EvaluatorSettings(**request["settings"])
    task = load_task(request["task"], settings.device.split(":")[0])
    language = get_language(request["language"], settings)
    import triton  # noqa: F401 - before isolation: its import reads its own files

    scratch = request_path.parent
    isolation = enter_isolation(scratch, allow_processes=True)
    kernel = language.load(Path(request["artifact"]), request["entry"], request["spec"])
    done = triton_aot.compile_calls(task, getattr(task.module, language.launcher), kernel.fn,
                                    request["shapes"], int(request["capability"]),
                                    workers=int(request.get("workers", 1)))
    report = {**done.as_json(), "isolation": isolation}
    (scratch / REPORT).write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
