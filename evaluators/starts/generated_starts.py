"""A search's start from ``torch.compile``, generated once per machine in a process of its own.

``compile_start(task, language, settings)`` is Inductor's code for the task's reference, one
version per shape (evaluators/inductor/inductor_start.py), for every shape the evaluator will run it on:
the task's tuning and held-out shapes and the evaluator's extra checks. Each kernel launches as
Inductor's autotuning chose on its shape, so the start is ``torch.compile``'s own kernel; the
tuning shapes' versions have knobs of their own.

Generation runs ``python -m kernelswarm.evaluators.starts.generated_starts REQUEST REPLY``: the task's
reference and ``torch.compile`` are trusted code, but their CUDA context, the GPU memory of their
inputs and Inductor's compile workers are not the search's to keep. The result is cached in
``<cache_dir>/starts/`` under a key of the task folder's content, the device's name, the torch
and triton versions, the shapes and this generator's own code, so a later search on the machine
starts at once; one process generates an entry while others that need it wait
(``measured_once``).

Each tuning shape is compiled in the ``torch.compile`` mode that is faster on it by the
project's own timer: the baselines' table (evaluators/baselines/baselines.py, which times both modes per
shape and is measured first if this machine has not yet) names it; other shapes are compiled in
the default mode. Its kernels then launch with the settings the baselines' own compile ran
with (``BaselineTime.configs``), where the table has them: Inductor's autotuning picks among
configs its own benchmark finds near-equal, so a second compile may keep another one. So each
version is the kernel of the best ``torch.compile`` a user could run, as it was timed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ...search import Shape, Task, load_task
from ..baselines.baselines import (
    baseline_versions,
    device_name,
    measure_baselines,
    measured_once,
    run_worker_process,
    task_content_hash,
)
from ..inductor.inductor_code import GenerationError
from ..inductor.inductor_start import GeneratedStart
from ..settings import EvaluatorSettings

WORKER_MODULE = "kernelswarm.evaluators.starts.generated_starts"
WORKERS_ENV = "KERNELSWARM_START_WORKERS"
_MODE = re.compile(r"mode (\S+)")  # the baselines' note on the faster compile mode
# The files whose code decides what is generated: a change to one makes the cache miss.
_GENERATOR_FILES = ("inductor/inductor_code.py", "inductor/inductor_start.py",
                    "inductor/inductor_triton.py", "inductor/inductor_cpp.py",
                    "starts/generated_starts.py")


def start_shapes(task: Task, settings: EvaluatorSettings) -> tuple[list[dict[str, Any]],
                                                                   list[dict[str, Any]]]:
    """(the task's tuning and held-out shapes, the evaluator's extra check shapes not among
    them): every shape the evaluator runs a candidate on."""
    own = [dict(s) for s in (*task.tuning_shapes, *task.heldout_shapes)]
    seen = {Shape.of(s).label for s in own}
    checks = []
    for check in settings.extra_checks:
        label = Shape.of(check["shape"]).label
        if label not in seen:
            seen.add(label)
            checks.append(dict(check["shape"]))
    return own, checks


def _generator_hash() -> str:
    digest = hashlib.sha256()
    for name in _GENERATOR_FILES:
        digest.update((Path(__file__).parents[1] / name).read_bytes())
    return digest.hexdigest()


def compile_choices(task: Task, language: str, settings: EvaluatorSettings
                    ) -> tuple[dict[str, str], dict[str, dict[str, dict[str, int]]]]:
    """Per tuning shape, the ``torch.compile`` mode the baselines found faster and the launch
    settings its kernels ran with there (on a GPU; the table is the evaluator's own, from the
    cache or measured now); nothing on the CPU."""
    if not settings.device.startswith("cuda"):
        return {}, {}
    table = measure_baselines(task, settings, language=language)
    modes, configs = {}, {}
    for shape in task.tuning_shapes:
        compiled = table.get(shape.label, "compile")
        found = _MODE.match(compiled.detail or "")
        if found:
            modes[shape.label] = found.group(1)
        if compiled.configs:
            configs[shape.label] = {k: dict(v) for k, v in compiled.configs.items()}
    return modes, configs


def cache_path(task: Task, language: str, settings: EvaluatorSettings,
               shapes: Sequence[Mapping[str, Any]], optional: Sequence[Mapping[str, Any]],
               modes: Mapping[str, str], configs: Mapping[str, Any] | None = None) -> Path:
    """Where the start for these shapes on this machine is kept."""
    key = hashlib.sha256(json.dumps(
        [task_content_hash(task), device_name(settings.device), baseline_versions(task),
         language, [Shape.of(s).label for s in shapes], [Shape.of(s).label for s in optional],
         dict(modes), dict(configs or {}), _generator_hash()],
        sort_keys=True).encode()).hexdigest()[:24]
    return Path(settings.cache_dir) / "starts" / f"{task.name}-{language}-{key}.json"


def compile_start(task: Task | Path | str, language: str, settings: EvaluatorSettings,
                  timeout_s: float = 900.0, phases: dict[str, float] | None = None
                  ) -> tuple[GeneratedStart, bool]:
    """(the start from ``torch.compile``, whether it came from the cache);
    ``GenerationError`` says why none can be made (what Inductor emitted that no start can be
    written from, a reference it cannot compile, a worker that failed or ran out of time).
    ``phases``, where given, receives the seconds spent on the baselines (``baselines_s``:
    measured now, or read) and on generating (``generation_s``: 0 when cached)."""
    phases = {} if phases is None else phases
    if not isinstance(task, Task):
        task = load_task(task, settings.device.split(":")[0])
    shapes, optional = start_shapes(task, settings)
    began = time.monotonic()
    modes, configs = compile_choices(task, language, settings)
    phases["baselines_s"] = round(time.monotonic() - began, 2)
    phases["generation_s"] = 0.0
    path = cache_path(task, language, settings, shapes, optional, modes, configs)
    kept = _kept(path)
    if kept is not None:
        return kept, True
    began = time.monotonic()
    with measured_once(path):
        kept = _kept(path)  # generated while this one waited
        if kept is not None:
            phases["generation_s"] = round(time.monotonic() - began, 2)
            return kept, True
        reply = _run_worker({"task": str(task.path), "language": language,
                             "device": settings.device, "shapes": shapes,
                             "optional": optional, "modes": modes, "configs": configs,
                             "workers": generation_workers()},
                            settings.device, timeout_s)
        if "error" in reply:
            raise GenerationError(reply["error"])
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(reply, indent=1))
        temporary.replace(path)
    phases["generation_s"] = round(time.monotonic() - began, 2)
    return _start(reply), False


def generation_workers() -> int:
    """Processes that compile a start's shapes side by side: ``$KERNELSWARM_START_WORKERS``,
    else one per four cores, at most four (each runs Inductor with its share of the cores'
    compile threads); 1 on a machine of fewer than eight cores."""
    named = os.environ.get(WORKERS_ENV, "").strip()
    if named:
        try:
            return max(1, int(named))
        except ValueError:
            raise GenerationError(f"{WORKERS_ENV}={named!r} is not a whole number") from None
    return max(1, min(4, (os.cpu_count() or 1) // 4))


def _start(doc: Mapping[str, Any]) -> GeneratedStart:
    return GeneratedStart(language=doc["language"], source=doc["source"], entry=doc["entry"],
                          shapes=tuple(doc["shapes"]),
                          knobs={k: tuple(v) for k, v in doc["knobs"].items()},
                          skipped=tuple(doc.get("skipped", ())))


def _kept(path: Path) -> GeneratedStart | None:
    if not path.is_file():
        return None
    try:
        return _start(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # a damaged entry is generated again


def _run_worker(request: dict[str, Any], device: str, timeout_s: float) -> dict[str, Any]:
    try:
        status, stderr, reply = run_worker_process(WORKER_MODULE, request, device, timeout_s)
    except subprocess.TimeoutExpired:
        raise GenerationError(f"generating the start of {request['task']} from "
                              f"torch.compile took more than {timeout_s:g} s") from None
    if status != 0 or reply is None:
        raise GenerationError(f"the start's generator failed (exit {status}) on "
                              f"{request['task']}:\n{stderr[-3000:]}")
    return dict(reply)


def _generate(request: Mapping[str, Any]) -> dict[str, Any]:
    """The worker's side: generate, and answer the start or the reason there is none."""
    import torch

    from ..inductor.inductor_start import generate_start

    device = str(request["device"])
    if device.startswith("cuda") and ":" in device:
        torch.cuda.set_device(device)
    task = load_task(request["task"], device.split(":")[0])
    try:
        generated = generate_start(task, request["language"], request["shapes"],
                                   optional=request["optional"], modes=request.get("modes"),
                                   configs=request.get("configs"),
                                   workers=int(request.get("workers", 1)))
    except GenerationError as exc:
        return {"error": str(exc)}
    doc = asdict(generated)
    doc["knobs"] = {k: list(v) for k, v in generated.knobs.items()}
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    asked, answer = (argv if argv is not None else sys.argv[1:])[:2]
    reply = _generate(json.loads(Path(asked).read_text()))
    Path(answer).write_text(json.dumps(reply))
    return 0


if __name__ == "__main__":
    sys.exit(main())
