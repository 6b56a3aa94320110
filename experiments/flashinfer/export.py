"""A kernel written back as a FlashInfer-Trace solution, with one trace per workload.

``kernelswarm tasks export-flashinfer TASK (KERNEL | --run RUN_DIR) OUT`` takes a task folder
that ``import-flashinfer`` wrote and a kernel for it (a file with its knob header, as every run
writes them, or a run's best kernel), judges the kernel once more on every workload the device
runs (held-out ones too, each timed), and writes

    OUT/solutions/<op_type>/<definition>/<solution>.json   the solution (sources, spec)
    OUT/traces/<op_type>/<definition>.jsonl                 one trace per workload, appended
    OUT/logs/<solution>.json                                the evaluation the traces come from

The solution's source is self-contained (experiments/sinks/sources.py: the knob values it was
judged with as ``#define`` for cpp, as the entry point's defaults for triton), so it builds and
runs as it was judged. Only a kernel that passes every workload
is exported: a trace says what was measured, never a guess.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from dataclasses import asdict, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator
from kernelswarm.search import (
    SPECS,
    Arguments,
    Evaluation,
    LanguageSpec,
    Origin,
    Shape,
    TaskError,
    UnknownLanguage,
    load_task,
    spec_for_suffix,
)

from ..evaluation.kernel_file import file_candidate
from ..sinks.sources import self_contained_source

_HELDOUT_LINE = re.compile(r"^HELDOUT_UUIDS = .*$", re.M)
_CPU_HELDOUT_LINE = re.compile(r"^CPU_HELDOUT = .*$", re.M)


def _every_workload_task(task_path: Path, scratch: Path) -> Path:
    """A copy of the task in which every workload is a timed shape (none held out)."""
    copy = scratch / task_path.name
    shutil.copytree(task_path, copy)
    text = (copy / "task.py").read_text()
    text = _HELDOUT_LINE.sub("HELDOUT_UUIDS = []", text)
    # the cpu's held-out workload is timed too: it joins the cpu tuning workloads
    text = _CPU_HELDOUT_LINE.sub("CPU_HELDOUT = []\nCPU_WORKLOADS = CPU_WORKLOADS + "
                                 + _CPU_HELDOUT_LINE.search(text).group(0).split(" = ", 1)[1],
                                 text)
    (copy / "task.py").write_text(text)
    return copy


def _hardware(device: str) -> str:
    """The device's name as FlashInfer-Trace writes hardware (``NVIDIA_H100_80GB_HBM3``)."""
    from kernelswarm.evaluators import device_name

    return device_name(device).split(": ", 1)[-1].strip().replace(" ", "_")


def _libs() -> dict[str, str]:
    """The library versions the evaluation ran with (those installed)."""
    from kernelswarm.evaluators import software_versions

    return {name.removesuffix(" (torch)"): version for name, version in software_versions().items()
            if version not in ("None", "not installed") and not version.startswith("unavailable")}


def exported_language(kernel_file: Path) -> LanguageSpec:
    """The language ``kernel_file`` is written in (by its suffix), one that FlashInfer-Trace
    solutions are written in (``LanguageSpec.flashinfer_language``); ``TaskError`` otherwise."""
    try:
        spec: LanguageSpec | None = spec_for_suffix(kernel_file.suffix)
    except UnknownLanguage:
        spec = None
    if spec is None or spec.flashinfer_language is None:
        expected = ", ".join(f"{s.suffix} ({s.name})" for s in SPECS.values()
                             if s.flashinfer_language is not None and s.claims_suffixes)
        raise TaskError(f"{kernel_file}: a kernel file in a language FlashInfer-Trace solutions "
                        f"are written in is expected: {expected}")
    return spec


def solution_spec(language: LanguageSpec, entry: str, hardware: str) -> dict[str, Any]:
    """The solution's ``spec`` (FlashInfer-Trace) for a kernel in ``language``."""
    return {"language": language.flashinfer_language, "target_hardware": [hardware],
            "entry_point": f"kernel{language.suffix}::{entry}",
            "destination_passing_style": True,
            "dependencies": list(language.flashinfer_dependencies)}


def export_solution(task_path: str | Path, kernel_file: str | Path, out: str | Path, *,
                    device: str = "cpu", author: str = "kernelswarm",
                    settings: EvaluatorSettings | None = None,
                    hardware: str | None = None) -> tuple[Path, Path, Evaluation]:
    """Judge the kernel on every workload of ``device`` and write the solution and its traces;
    (solution file, traces file, the evaluation). ``TaskError`` when the kernel fails."""
    task_path = Path(task_path).expanduser().resolve()
    if not (task_path / "definition.json").is_file():
        raise TaskError(f"{task_path}: not a FlashInfer-Trace task (no definition.json; make "
                        f"one with kernelswarm tasks import-flashinfer)")
    definition = json.loads((task_path / "definition.json").read_text())
    kernel_file = Path(kernel_file).expanduser()
    spec = exported_language(kernel_file)
    language = spec.name
    settings = replace(settings or EvaluatorSettings(), device=device)
    with tempfile.TemporaryDirectory(prefix="flashinfer-export-") as scratch:
        every = _every_workload_task(task_path, Path(scratch))
        kind = device.split(":")[0]
        task = load_task(every, kind)
        labels = {Shape.of(dict(s)).label: s["workload"] for s in task.tuning_shapes}
        with SandboxEvaluator(every, language, settings) as evaluator:
            origin = Origin(role="user", move="export", rationale=str(kernel_file))
            candidate = file_candidate(evaluator.start_candidate, kernel_file.read_text(),
                                       origin)
            evaluation = evaluator.evaluate(candidate)
    if not evaluation.ok:
        raise TaskError(f"{kernel_file}: not exported, the kernel is {evaluation.status.value}: "
                        f"{evaluation.message}")
    source, entry = self_contained_source(candidate), candidate.entry
    name = f"{definition['name']}_kernelswarm_{language}_{candidate.id[:8]}"
    op_type = definition.get("op_type") or "unknown"
    out = Path(out).expanduser().resolve()
    solution = {
        "name": name, "definition": definition["name"], "author": author,
        "description": f"Found by kernelswarm ({candidate.origin.role}/{candidate.origin.move}). "
                       + ("The cpp entry point takes raw pointers, scalars and the var axes "
                          "(kernelswarm's calling contract); FlashInfer-Bench's cpp bindings "
                          "need a wrapper." if spec.arguments is Arguments.CTYPES else ""),
        "spec": solution_spec(spec, entry, hardware or _hardware(device)),
        "sources": [{"path": f"kernel{spec.suffix}", "content": source}],
    }
    solution_file = out / "solutions" / op_type / definition["name"] / f"{name}.json"
    solution_file.parent.mkdir(parents=True, exist_ok=True)
    solution_file.write_text(json.dumps(solution, indent=2) + "\n")
    log = out / "logs" / f"{name}.json"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(json.dumps(asdict(evaluation), indent=2, default=str) + "\n")
    traces_file = out / "traces" / op_type / f"{definition['name']}.jsonl"
    traces_file.parent.mkdir(parents=True, exist_ok=True)
    workloads = {w["uuid"]: w for w in map(json.loads, (task_path / "workloads.jsonl")
                                           .read_text().splitlines()) if w}
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    environment = {"hardware": hardware or _hardware(device), "libs": _libs()}
    with traces_file.open("a") as traces:
        for result in evaluation.shapes:
            reference_ms = result.eager_time_us / 1000
            latency_ms = result.time_us / 1000
            traces.write(json.dumps({
                "definition": definition["name"], "solution": name,
                "workload": workloads[labels[result.shape]],
                "evaluation": {
                    "status": "PASSED", "log_file": str(log),
                    "correctness": {"max_relative_error": result.max_rel_err,
                                    "max_absolute_error": result.max_abs_err},
                    "performance": {"latency_ms": latency_ms,
                                    "reference_latency_ms": reference_ms,
                                    "speedup_factor": reference_ms / latency_ms},
                    "environment": environment, "timestamp": now}}) + "\n")
    return solution_file, traces_file, evaluation
