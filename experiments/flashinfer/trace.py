"""FlashInfer-Trace definitions and workloads as kernelswarm tasks.

FlashInfer-Trace (the JSON schema of FlashInfer-Bench) describes a kernel by a **definition**
(named axes, constant or variable; named input and output tensors over those axes, with dtypes;
a PyTorch reference, ``run``) and its **workloads** (JSONL: the variable axes' values and where
each input comes from: ``random``, ``scalar`` with a value, or a ``safetensors`` file). This
module reads both directly (no flashinfer package) and writes a task folder:

    DIR/definition.json   the definition, unchanged
    DIR/workloads.jsonl   its workloads (safetensors paths made absolute)
    DIR/reference.py      the definition's reference code, whose ``run`` is the task's reference
    DIR/task.py           the task (experiments/flashinfer/template.py)
    DIR/kernel.cpp        the starting cpp kernel (given, or a stub with the signature)

Shapes: one per workload, ``{<var axis>: value, "workload": uuid, "dtype": ...}``. On cuda the
workloads as given (every ``heldout_every``-th one held out); on the cpu the smallest
``cpu_workloads`` of them (and the next as held-out), 16-bit floats as float32, variable axes
optionally set smaller (``cpu_axes``) where every tensor input is random.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelswarm.search import Task, TaskError, load_task

from .template import STUB_CPP, TASK_PY

DTYPES = ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1",
          "int64", "int32", "int16", "int8", "bool")
INPUT_TYPES = ("random", "scalar", "safetensors")
TOLERANCE = 1e-2


@dataclass(frozen=True)
class Definition:
    """A definition's parts kernelswarm uses, checked."""

    name: str
    op_type: str
    axes: Mapping[str, int | None]  # const axes: their value; var axes: None
    inputs: Mapping[str, Mapping[str, Any]]  # name -> {"shape": [axis, ...] | None, "dtype"}
    outputs: Mapping[str, Mapping[str, Any]]
    reference: str
    raw: Mapping[str, Any]


def _fail(where: str, message: str) -> TaskError:
    return TaskError(f"{where}: {message}")


def _tensors(doc: Mapping, key: str, axes: Mapping, where: str) -> dict[str, dict]:
    tensors = doc.get(key)
    if not isinstance(tensors, dict) or not tensors:
        raise _fail(where, f"{key!r} must be a non-empty object of name -> tensor")
    for name, tensor in tensors.items():
        if not isinstance(tensor, dict) or "shape" not in tensor or "dtype" not in tensor:
            raise _fail(where, f"{key}.{name} must have 'shape' and 'dtype'")
        shape = tensor["shape"]
        if shape is not None and (not isinstance(shape, list)
                                  or not all(isinstance(a, str) for a in shape)):
            raise _fail(where, f"{key}.{name}.shape must be a list of axis names or null")
        unknown = [a for a in shape or [] if a not in axes]
        if unknown:
            raise _fail(where, f"{key}.{name}.shape names {unknown}, not in 'axes' "
                               f"({', '.join(axes)})")
        if tensor["dtype"] not in DTYPES:
            raise _fail(where, f"{key}.{name}.dtype {tensor['dtype']!r}: allowed: "
                               f"{', '.join(DTYPES)}")
    return tensors


def read_definition(path: str | Path) -> Definition:
    """Read and check a definition JSON file; ``TaskError`` names the field that is wrong."""
    path = Path(path).expanduser().resolve()
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise TaskError(f"{path}: no such definition file") from None
    except json.JSONDecodeError as exc:
        raise TaskError(f"{path}: not valid JSON: {exc}") from None
    where = str(path)
    if not isinstance(doc, dict):
        raise _fail(where, "a definition is a JSON object")
    for key in ("name", "reference"):
        if not isinstance(doc.get(key), str) or not doc[key]:
            raise _fail(where, f"{key!r} must be a non-empty string")
    if "def run" not in doc["reference"]:
        raise _fail(where, "'reference' must define a function run(...)")
    raw_axes = doc.get("axes")
    if not isinstance(raw_axes, dict) or not raw_axes:
        raise _fail(where, "'axes' must be a non-empty object of name -> {type, value}")
    axes: dict[str, int | None] = {}
    for name, axis in raw_axes.items():
        kind = axis.get("type") if isinstance(axis, dict) else None
        if kind == "const" and isinstance(axis.get("value"), int) and axis["value"] > 0:
            axes[name] = axis["value"]
        elif kind == "var":
            axes[name] = None
        else:
            raise _fail(where, f"axes.{name} must be {{'type': 'var'}} or {{'type': 'const', "
                               f"'value': a positive integer}}, got {axis!r}")
    return Definition(doc["name"], str(doc.get("op_type", "")), axes,
                      _tensors(doc, "inputs", axes, where), _tensors(doc, "outputs", axes, where),
                      doc["reference"], doc)


def _resolve_blob(path: str, base: Path, where: str) -> str:
    """A safetensors path as an absolute one: as given, or under the workloads file's folder or
    one of its parents (datasets store paths relative to their root)."""
    candidate = Path(path).expanduser()
    if candidate.is_absolute():
        if candidate.is_file():
            return str(candidate)
    else:
        for folder in (base, *base.parents):
            if (folder / candidate).is_file():
                return str((folder / candidate).resolve())
    raise _fail(where, f"safetensors file {path!r} not found (relative paths are looked up "
                       f"from {base} upwards)")


def read_workloads(path: str | Path, definition: Definition) -> list[dict]:
    """The workloads of ``definition`` in a JSONL file (lines are trace objects with a
    ``workload`` field, or bare workloads), checked and with absolute safetensors paths."""
    path = Path(path).expanduser().resolve()
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        raise TaskError(f"{path}: no such workloads file") from None
    workloads = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            doc = json.loads(line)
        except json.JSONDecodeError as exc:
            raise _fail(where, f"not valid JSON: {exc}") from None
        if doc.get("definition", definition.name) != definition.name:
            continue  # another definition's workload in a shared file
        workload = doc.get("workload", doc)
        workloads.append(_checked_workload(workload, definition, path.parent, where))
    if not workloads:
        raise TaskError(f"{path}: no workloads of definition {definition.name!r}")
    return workloads


def _checked_workload(workload: Any, definition: Definition, base: Path, where: str) -> dict:
    if not isinstance(workload, dict) or not isinstance(workload.get("uuid"), str):
        raise _fail(where, "a workload needs a string 'uuid'")
    axes = workload.get("axes", {})
    for name, value in definition.axes.items():
        if value is None and (not isinstance(axes.get(name), int) or axes[name] < 0):
            raise _fail(where, f"workload {workload['uuid']}: axes.{name} (a var axis) needs "
                               f"a non-negative integer")
    inputs = dict(workload.get("inputs", {}))
    for name, source in inputs.items():
        if name not in definition.inputs:
            raise _fail(where, f"workload {workload['uuid']}: inputs.{name} is not an input of "
                               f"the definition")
        kind = source.get("type") if isinstance(source, dict) else None
        if kind not in INPUT_TYPES:
            raise _fail(where, f"workload {workload['uuid']}: inputs.{name}.type {kind!r}: "
                               f"allowed: {', '.join(INPUT_TYPES)}")
        if kind == "scalar" and not isinstance(source.get("value"), (int, float, bool)):
            raise _fail(where, f"workload {workload['uuid']}: inputs.{name} (scalar) needs a "
                               f"number 'value'")
        if kind == "safetensors":
            if not isinstance(source.get("tensor_key"), str):
                raise _fail(where, f"workload {workload['uuid']}: inputs.{name} needs "
                                   f"'tensor_key'")
            inputs[name] = {**source, "path": _resolve_blob(str(source.get("path")), base,
                                                            where)}
    return {"uuid": workload["uuid"], "axes": {k: axes[k] for k in definition.axes
                                               if definition.axes[k] is None},
            "inputs": inputs}


def _bytes(definition: Definition, workload: dict) -> int:
    sizes = {**{k: v for k, v in definition.axes.items() if v}, **workload["axes"]}
    total = 0
    for tensor in (*definition.inputs.values(), *definition.outputs.values()):
        count = 1
        for axis in tensor["shape"] or []:
            count *= sizes[axis]
        total += count
    return total


def _split(definition: Definition, workloads: list[dict], cpu_workloads: int,
           heldout_every: int) -> tuple[list[str], list[str], list[str]]:
    """(cpu tuning, cpu held-out, cuda held-out) workload uuids."""
    smallest = sorted(workloads, key=lambda w: _bytes(definition, w))
    cpu = [w["uuid"] for w in smallest[:cpu_workloads]]
    cpu_heldout = [w["uuid"] for w in smallest[cpu_workloads:cpu_workloads + 1]]
    heldout = [w["uuid"] for i, w in enumerate(workloads)
               if len(workloads) > 1 and heldout_every > 0 and i % heldout_every
               == heldout_every - 1]
    return cpu, cpu_heldout, heldout


def _check_cpu_axes(definition: Definition, workloads: list[dict], cpu: list[str],
                    cpu_axes: Mapping[str, int]) -> None:
    for name, value in cpu_axes.items():
        if definition.axes.get(name, 0) is not None:
            raise TaskError(f"--cpu-axis {name}: not a var axis of {definition.name}; its var "
                            f"axes: {', '.join(a for a, v in definition.axes.items() if v is None)}")
        if not isinstance(value, int) or value < 1:
            raise TaskError(f"--cpu-axis {name}={value!r}: must be a positive integer")
    if cpu_axes:
        chosen = [w for w in workloads if w["uuid"] in cpu]
        if any(s.get("type") == "safetensors" for w in chosen for s in w["inputs"].values()):
            raise TaskError("--cpu-axis: the cpu workloads load tensors from safetensors files, "
                            "whose sizes are fixed")


@dataclass(frozen=True)
class ImportedDefinition:
    """The task written for a definition, and which workloads its shapes are."""

    task: Task
    cpu: tuple[str, ...]
    heldout: tuple[str, ...]


def import_definition(definition_file: str | Path, workloads_file: str | Path,
                      dest: str | Path, *, cpp_source: str | None = None, cpu_workloads: int = 2,
                      cpu_axes: Mapping[str, int] | None = None, heldout_every: int = 4,
                      tolerance: float = TOLERANCE) -> ImportedDefinition:
    """Write the task folder ``dest`` for a definition and its workloads; return it loaded.

    Built beside ``dest`` and moved there once it loads (nothing is left behind on failure);
    ``dest`` must not exist or be empty."""
    definition = read_definition(definition_file)
    workloads = read_workloads(workloads_file, definition)
    cpu, cpu_heldout, heldout = _split(definition, workloads, max(1, cpu_workloads),
                                       heldout_every)
    cpu_axes = dict(cpu_axes or {})
    _check_cpu_axes(definition, workloads, cpu + cpu_heldout, cpu_axes)
    dest = Path(dest).expanduser().resolve()
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise TaskError(f"{dest}: already exists and is not an empty folder")
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        shutil.copyfile(Path(definition_file).expanduser(), staging / "definition.json")
        (staging / "workloads.jsonl").write_text(
            "".join(json.dumps(w) + "\n" for w in workloads))
        (staging / "reference.py").write_text(definition.reference)
        (staging / "task.py").write_text(TASK_PY.substitute(
            name=repr(definition.name), cpu=repr(cpu), cpu_heldout=repr(cpu_heldout),
            heldout=repr(heldout), cpu_axes=repr(cpu_axes), tolerance=repr(float(tolerance))))
        (staging / "kernel.cpp").write_text(cpp_source or "")
        task = load_task(staging, "cpu")
        if cpp_source is None:
            (staging / "kernel.cpp").write_text(STUB_CPP.substitute(
                name=definition.name, signature=task.module.c_signature()))
        if dest.exists():
            dest.rmdir()
        staging.rename(dest)
    except TaskError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise TaskError(str(exc).replace(str(staging), str(dest))) from exc
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return ImportedDefinition(load_task(dest, "cpu"), tuple(cpu), tuple(heldout))
