"""An evaluator's calibration, kept on disk: measured once per task, language, device and
software, then read by every evaluator that would measure the same (a second run, a
``--resume``, each cell of a sweep, ``eval`` and ``tune`` of the task, every test process).

The entry is ``<cache_dir>/calibration/<task>-<language>-<key>.json``. Its key hashes what the
figures depend on: the task folder's content, the language and the starting kernel (its id covers
its source and knob values), the device's name, the versions of Python, torch, triton, the CUDA
bindings and the task's libraries, every setting of the protocol that changes a calibration figure
(timing, seeds, held-out shapes, extra checks, cache flush), whether ``torch.compile`` is among the
baselines (``KERNELSWARM_BASELINE_COMPILE``), and ``PROTOCOL`` (bumped when the way a figure is
measured changes). A calibration whose baselines failed is not kept, so the next
evaluator measures them again. A damaged entry is measured again and replaced; entries are
written whole (a temporary file, then a rename), so concurrent evaluators never read half of one.
Evaluators that need the same entry at the same time (a sweep's cells starting together on
several GPUs) measure it once: the first holds the entry's lock (``baselines.measured_once``)
while it measures, the others wait for it and read what it wrote.
Set ``KERNELSWARM_CALIBRATION_CACHE=0`` to calibrate afresh every time.

The figures come from a runner that never held candidate code, in an earlier process on a machine
of the same name; the canary of evaluators/judge/timing.py holds each candidate's runner to them,
and a canary that disagrees is measured a second time before it is a verdict.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ...search import Shape
from ..baselines.baselines import (
    BaselineTable,
    _version,
    baseline_versions,
    compile_wanted,
    device_name,
    task_content_hash,
)
from ..measure.machine import MachineFigures
from ..measure.timing_protocol import TimingSettings
from ..settings import EvaluatorSettings
from .figures import Baselines, Calibration
from .timing import CleanFigures

CALIBRATION_ENV = "KERNELSWARM_CALIBRATION_CACHE"
# The measuring protocol's revision: every copy's outputs poisoned before each graph replay,
# the machine's launch floor measured, and the baselines' results held per copy.
PROTOCOL = "2026-11-30.baseline-results-held"


def calibration_path(task: Any, language: str, start_id: str,
                     settings: EvaluatorSettings) -> Path | None:
    """Where this evaluator's calibration is kept; None with ``KERNELSWARM_CALIBRATION_CACHE=0``."""
    if os.environ.get(CALIBRATION_ENV) == "0":
        return None
    versions = {**baseline_versions(task), "cuda-bindings": _version("cuda-bindings")}
    described = [PROTOCOL, task_content_hash(task), language, start_id,
                 device_name(settings.device), versions, TimingSettings.of(settings).as_dict(),
                 settings.check_heldout, [dict(c) for c in settings.extra_checks],
                 compile_wanted(settings.device)[0]]
    key = hashlib.sha256(json.dumps(described, sort_keys=True, default=str).encode()
                         ).hexdigest()[:24]
    return Path(settings.cache_dir) / "calibration" / f"{task.name}-{language}-{key}.json"


def read_calibration(path: Path | None) -> Calibration | None:
    """The calibration kept at ``path``, or None (none kept, or a damaged entry)."""
    if path is None or not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
        table = doc["baselines"]["table"]
        return Calibration(
            machine=MachineFigures(**doc["machine"]),
            baselines=Baselines(
                eager_us=_numbers(doc["baselines"]["eager_us"]),
                compile_us=_numbers(doc["baselines"]["compile_us"]),
                table=BaselineTable.from_json(table, cached=True) if table else None,
                error=str(doc["baselines"]["error"])),
            clean={label: CleanFigures(**figures) for label, figures in doc["clean"].items()},
            checks=tuple({"shape": Shape.of(c["shape"]), "scale": float(c["scale"])}
                         for c in doc["checks"]),
            dropped_checks={str(k): str(v) for k, v in doc["dropped_checks"].items()},
            flush_bytes=int(doc["flush_bytes"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def keep_calibration(path: Path | None, calibration: Calibration) -> None:
    """Write ``calibration`` to ``path`` whole (not one whose baselines failed)."""
    if path is None or calibration.baselines.error:
        return
    b = calibration.baselines
    doc = {"protocol": PROTOCOL, "machine": asdict(calibration.machine),
           "baselines": {"eager_us": _finite(b.eager_us), "compile_us": _finite(b.compile_us),
                         "table": b.table.as_json() if b.table else None, "error": b.error},
           "clean": {label: asdict(c) for label, c in calibration.clean.items()},
           "checks": [{"shape": dict(c["shape"]), "scale": c["scale"]}
                      for c in calibration.checks],
           "dropped_checks": dict(calibration.dropped_checks),
           "flush_bytes": calibration.flush_bytes}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(doc, indent=1, default=str))
        temporary.replace(path)
    except OSError:
        pass  # a read-only cache: calibrated again next time


def _finite(values: Any) -> dict[str, float | None]:
    return {str(k): (float(v) if math.isfinite(float(v)) else None) for k, v in values.items()}


def _numbers(values: Any) -> dict[str, float]:
    return {str(k): (math.nan if v is None else float(v)) for k, v in values.items()}
