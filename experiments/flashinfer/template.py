"""The ``task.py`` that ``kernelswarm tasks import-flashinfer`` writes for a definition.

Text (it imports torch, which only task files may) with ``$``-placeholders: ``$name``, ``$cpu``,
``$cpu_heldout``, ``$heldout`` (workload uuids), ``$cpu_axes`` and ``$tolerance``.
"""

from __future__ import annotations

from string import Template

TASK_PY = Template('''\
"""FlashInfer-Trace definition $name, with its workloads.

definition.json holds the definition, workloads.jsonl its workloads, reference.py the
definition's reference (``run``). One shape per workload: its var axes, its uuid and a dtype
(the first output's; on the cpu float32, and every 16-bit float tensor is float32 there).

Inputs, in the definition's order: a workload's ``random`` input is drawn with the seed
(floats: standard normal; integers: uniform in [0, 16); bools: fair), ``scalar`` is its value
(a 0-dimensional tensor here: int64, float64 or bool), ``safetensors`` is read from its file
(the same for every seed). An input a workload does not name is random.

cpp calling contract (destination-passing, as FlashInfer's): ``c_signature()`` prints it:

    extern "C" void run(<inputs>, <outputs>, <var axes as int64_t>);

a tensor a pointer to its contiguous data in its own dtype (16-bit floats as uint16_t), a
scalar input by value (int64_t or double); the var axes in the definition's order. A triton
entry point is called ``run(*inputs, *outputs)`` with scalars as Python numbers.
"""

import json
from pathlib import Path

import torch

_HERE = Path(__file__).parent
DEFINITION = json.loads((_HERE / "definition.json").read_text())
WORKLOADS = {w["uuid"]: w for w in map(json.loads, (_HERE / "workloads.jsonl").read_text()
                                       .splitlines()) if w}
NAME = $name
DESCRIPTION = DEFINITION.get("description", "") or __doc__

# Which workloads are shapes where (uuids); the cpu ones with these var axes set.
CPU_WORKLOADS = $cpu
CPU_HELDOUT = $cpu_heldout
HELDOUT_UUIDS = $heldout
CPU_AXES = $cpu_axes

_INPUTS = DEFINITION["inputs"]
_OUTPUTS = DEFINITION["outputs"]
_CONST = {k: a["value"] for k, a in DEFINITION["axes"].items() if a["type"] == "const"}
_VAR = [k for k, a in DEFINITION["axes"].items() if a["type"] == "var"]
_SIXTEEN = ("float16", "bfloat16")
_MAIN = next(iter(_OUTPUTS.values()))["dtype"]
_C_TYPES = {"float32": "float", "float16": "uint16_t", "bfloat16": "uint16_t",
            "float8_e4m3fn": "uint8_t", "float8_e5m2": "uint8_t", "float4_e2m1": "uint8_t",
            "int64": "int64_t", "int32": "int32_t", "int16": "int16_t", "int8": "int8_t",
            "bool": "bool"}
_FLOAT4 = getattr(torch, "float4_e2m1fn_x2", torch.uint8)


def _shape(uuid, device):
    axes = {**WORKLOADS[uuid]["axes"], **(CPU_AXES if device == "cpu" else {})}
    return {**axes, "workload": uuid, "dtype": "float32" if device == "cpu" else _MAIN}


TUNING_SHAPES = {"cpu": [_shape(u, "cpu") for u in CPU_WORKLOADS],
                 "cuda": [_shape(u, "cuda") for u in WORKLOADS if u not in HELDOUT_UUIDS]}
HELDOUT_SHAPES = {"cpu": [_shape(u, "cpu") for u in CPU_HELDOUT],
                  "cuda": [_shape(u, "cuda") for u in HELDOUT_UUIDS]}
TOLERANCES = {d: {"atol": $tolerance, "rtol": $tolerance}
              for d in ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")}

_SAFETENSORS = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
                "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32,
                "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool,
                "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2}
_BLOBS = {}


def _read_safetensors(path, key):
    """One tensor of a .safetensors file: an 8-byte little-endian header size, a JSON header
    (key -> dtype, shape, data_offsets), then the data."""
    if (path, key) not in _BLOBS:
        with open(path, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(size))
            if key not in header:
                raise KeyError(f"{path}: no tensor {key!r}; it has {sorted(header)}")
            entry = header[key]
            start, end = entry["data_offsets"]
            f.seek(8 + size + start)
            data = bytearray(f.read(end - start))
        tensor = torch.frombuffer(data, dtype=_SAFETENSORS[entry["dtype"]]) if data \\
            else torch.empty(0, dtype=_SAFETENSORS[entry["dtype"]])
        _BLOBS[(path, key)] = tensor.reshape(entry["shape"])
    return _BLOBS[(path, key)]


def _dtype(name, shape):
    if name == "float4_e2m1":
        return _FLOAT4
    if shape["dtype"] == "float32" and name in _SIXTEEN:
        return torch.float32
    return getattr(torch, name)


def _dims(tensor, shape):
    sizes = {**_CONST, **shape}
    return [sizes[a] for a in tensor["shape"]]


def _input(name, spec, shape, generator):
    source = WORKLOADS[shape["workload"]]["inputs"].get(name, {"type": "random"})
    dtype = _dtype(spec["dtype"], shape)
    if spec["shape"] is None or source["type"] == "scalar":
        value = source.get("value")
        if value is None:
            value = float(torch.randn((), generator=generator))
        kind = torch.bool if isinstance(value, bool) else \\
            torch.int64 if isinstance(value, int) else torch.float64
        return torch.tensor(value, dtype=kind)
    if source["type"] == "safetensors":
        return _read_safetensors(source["path"], source["tensor_key"]).to(dtype)
    dims = _dims(spec, shape)
    if dtype == torch.bool:
        return torch.randint(0, 2, dims, generator=generator).bool()
    if dtype.is_floating_point and dtype.itemsize > 1:
        return torch.randn(dims, generator=generator).to(dtype)
    if dtype.is_floating_point:
        return torch.randn(dims, generator=generator).clamp(-4, 4).to(dtype)
    return torch.randint(0, 16, dims, generator=generator).to(dtype)


def make_inputs(shape, seed, device):
    generator = torch.Generator().manual_seed(seed)
    tensors = [_input(n, s, shape, generator) for n, s in _INPUTS.items()]
    return tuple(t.to(device=device, copy=True).contiguous() for t in tensors)


def make_outputs(shape, device):
    return tuple(torch.empty(_dims(s, shape) if s["shape"] is not None else (),
                             dtype=_dtype(s["dtype"], shape), device=device)
                 for s in _OUTPUTS.values())


def _load_reference():
    import importlib.util

    path = _HERE / "reference.py"
    spec = importlib.util.spec_from_file_location(f"flashinfer_reference_{abs(hash(str(path))):x}",
                                                  path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.run


_run = _load_reference()


def _arguments(inputs):
    """The reference's arguments: scalars (shape null) as Python numbers."""
    return [t.item() if s["shape"] is None else t for t, s in zip(inputs, _INPUTS.values())]


def reference(*inputs):
    device = inputs[0].device if inputs else torch.device("cpu")
    with torch.no_grad():
        result = _run(*_arguments(inputs))
    if isinstance(result, dict):
        result = [result[name] for name in _OUTPUTS]
    elif not isinstance(result, (tuple, list)):
        result = [result]
    outputs = []
    for value, spec in zip(result, _OUTPUTS.values(), strict=True):
        float32 = device.type == "cpu" and spec["dtype"] in _SIXTEEN
        dtype = torch.float32 if float32 else _dtype(spec["dtype"], {"dtype": _MAIN})
        outputs.append(value.to(dtype) if isinstance(value, torch.Tensor)
                       else torch.tensor(value, dtype=dtype, device=device))
    return tuple(outputs)


def _scalar_kind(spec):
    return "f64" if spec["dtype"].startswith("float") else "i64"


KERNELS = {
    "cpp": {
        "source": "kernel.cpp",
        "entry": "run",
        "argtypes": [*("ptr" if s["shape"] is not None else _scalar_kind(s)
                       for s in _INPUTS.values()),
                     *["ptr"] * len(_OUTPUTS), *["i64"] * len(_VAR)],
        "knobs": {},
    },
}


def launch_cpp(fn, inputs, outputs, shape):
    arguments = [t.data_ptr() if s["shape"] is not None else t.item()
                 for t, s in zip(inputs, _INPUTS.values())]
    fn(*arguments, *(t.data_ptr() for t in outputs), *(shape[a] for a in _VAR))


def launch_triton(fn, inputs, outputs, shape):
    fn(*_arguments(inputs), *outputs)


def roofline(shape):
    """(bytes, 0): every tensor read or written once; flops are not known for an arbitrary
    reference."""
    total = 0
    for spec in (*_INPUTS.values(), *_OUTPUTS.values()):
        if spec["shape"] is not None:
            count = 1
            for d in _dims(spec, shape):
                count *= d
            total += count * max(1, torch.empty((), dtype=_dtype(spec["dtype"], shape)).itemsize)
    return max(total, 1), 0


def c_signature(device="cpu"):
    """The cpp entry point, each parameter commented with its axes."""
    shape = (TUNING_SHAPES[device] or HELDOUT_SHAPES[device])[0]
    rows = []
    for role, tensors in (("input", _INPUTS), ("output", _OUTPUTS)):
        for name, spec in tensors.items():
            dtype = "float32" if shape["dtype"] == "float32" and spec["dtype"] in _SIXTEEN \\
                else spec["dtype"]
            if spec["shape"] is None:
                rows.append((f"{'double' if _scalar_kind(spec) == 'f64' else 'int64_t'} {name}",
                             f"{role} {name}: a scalar ({spec['dtype']})"))
            else:
                const = "const " if role == "input" else ""
                rows.append((f"{const}{_C_TYPES[dtype]}* {name}",
                             f"{role} {name}: [{', '.join(spec['shape'])}] {dtype}"))
    rows += [(f"int64_t {a}", "var axis") for a in _VAR]
    width = max(len(d) for d, _ in rows) + 1
    lines = [f"    {(d + ','):<{width}}  // {c}" for d, c in rows]
    lines[-1] = lines[-1].replace(",", " ", 1)
    return 'extern "C" void run(\\n' + "\\n".join(lines) + "\\n)"


WRONG_RESULT_HINT = ("if the kernel reads its arguments in another order: the entry point takes "
                     + ", ".join([*_INPUTS, *_OUTPUTS, *_VAR]))
''')

STUB_CPP = Template('''\
// FlashInfer-Trace definition $name: write the kernel here (it must compute the definition's
// reference, reference.py; `kernelswarm tasks check . --evaluate` runs it against it).
#include <stdint.h>

$signature {
}
''')
