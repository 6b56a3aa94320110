"""The ``task.py`` that ``kernelswarm tasks import-kernelbench`` writes beside a problem file.

Kept as text (it imports torch, which only task files may) with ``$``-placeholders for what
differs between problems: ``$name``, ``$origin``, ``$tuning``, ``$heldout``, ``$fixed``,
``$tolerances`` and ``$traced`` (the figures ``trace()`` in the written file gives per shape).
"""

from __future__ import annotations

from string import Template

from .signature import SIGNATURE_PY

TASK_PY = Template('''\
"""KernelBench problem $name, imported from $origin.

The reference is ``Model.forward`` of problem.py (a copy of the problem file), the model built
from ``get_init_inputs()`` and run in eval mode. A shape sets the problem's integer constants
before the model is built and ``get_inputs()`` runs. The constants the model is built from
(FIXED) may differ between shapes: each shape's values reach the reference as the last input.

The kernel's arguments, in order (``c_signature()`` prints them for this problem):

1. forward's arguments (``get_inputs()``): a tensor as a pointer; an int or bool as int64_t, a
   float as double, a tuple of ints as one int64_t per element (``name_0``, ``name_1``, ...);
   None is skipped;
2. the constructor's settings (``get_init_inputs()``), the same way, named after
   ``Model.__init__``'s parameters; other values (strings, tensors) are not passed;
3. the model's parameters and floating-point buffers (``named_parameters()``, then
   ``named_buffers()``), as pointers;
4. the outputs (forward's result, or each tensor of a tuple result), as pointers;
5. ``sizes``: the dimensions of every tensor of 1 and 3, then of 4, in that order.

A triton kernel (kernel.py, entry point ``forward``) gets 1 to 4 in the same order, tensors as
tensors and scalars as Python numbers.

Scalars of ``get_inputs()`` reach ``make_inputs`` as 0-dimensional int64 tensors (a float as
its float64 bits, so that no input scaling changes it) for ``reference``; the launchers pass
the value traced for the shape, and a scalar must be the same for every seed. Tensors are drawn
with the problem's seed on the device asked for (get_inputs() runs with it as the default
device), parameters with SEED + it.
"""

import contextlib
import copy
import ctypes
import importlib.util
import inspect
import json
import struct
import sys
from pathlib import Path

import torch

NAME = $name
DESCRIPTION = __doc__

TUNING_SHAPES = $tuning
HELDOUT_SHAPES = $heldout
# Constants the model is built from (a model per combination of their values).
FIXED = $fixed
# Per shape label, from trace() when the folder was written, so that loading the task runs
# nothing. A shape missing here (added by hand) is traced when first used.
TRACED = $traced

# KernelBench's own tolerance (1e-2) unless a stricter one was asked for at import.
TOLERANCES = $tolerances
SEED = 0

_C_TYPES = {"float32": "float", "float64": "double", "float16": "uint16_t",
            "bfloat16": "uint16_t", "int64": "int64_t", "int32": "int32_t", "int16": "int16_t",
            "int8": "int8_t", "uint8": "uint8_t", "bool": "bool"}
# scalar kind -> (argtypes kind, C type)
_SCALARS = {"int": ("i64", "int64_t"), "bool": ("i64", "int64_t"), "float": ("f64", "double")}
_GUARD_BYTES = 2 << 30  # a shape the meta device cannot trace is run for real only below this


def _load_problem():
    path = Path(__file__).with_name("problem.py")
    spec = importlib.util.spec_from_file_location(f"kernelbench_problem_{abs(hash(str(path))):x}",
                                                  path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_problem = _load_problem()


def _fixed_key(shape):
    return tuple(shape[name] for name in FIXED if name in shape)


def _set_sizes(shape):
    for key, value in shape.items():
        if key != "dtype":
            setattr(_problem, key, value)


def _as_tuple(result):
    if isinstance(result, torch.Tensor):
        return (result,)
    if isinstance(result, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in result):
        return tuple(result)
    raise TypeError(f"Model.forward must return a tensor or a tuple of tensors, got "
                    f"{type(result).__name__}")


def _describe(value, where, passable):
    """One argument's entry in TRACED: its kind and its sizes (tensor) or value (scalar)."""
    if isinstance(value, torch.Tensor) and passable:
        return {"kind": "tensor", "shape": list(value.shape),
                "dtype": str(value.dtype).removeprefix("torch.")}
    if isinstance(value, bool):
        return {"kind": "bool", "value": value}
    if isinstance(value, int):
        return {"kind": "int", "value": value}
    if isinstance(value, float) and value == value and abs(value) != float("inf"):
        return {"kind": "float", "value": value}
    if isinstance(value, (tuple, list)) and value \\
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return {"kind": "ints", "value": list(value)}
    if value is None:
        return {"kind": "none"}
    if passable:
        raise TypeError(f"{where} is {value!r}; a kernel can be given tensors, ints, floats, "
                        f"bools, tuples of ints and None")
    return {"kind": "other", "repr": repr(value)[:60]}


def _model(shape, seed, device="cpu"):
    _set_sizes(shape)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED + seed)
        with torch.device(device):
            return _problem.Model(*_problem.get_init_inputs()).eval()


def _state(model):
    """The tensors a kernel gets besides forward's arguments, as (name, tensor)."""
    buffers = [(n, b) for n, b in model.named_buffers() if b.is_floating_point()]
    return [*model.named_parameters(), *buffers]


def _forward_args(shape, seed, device=None):
    """forward's arguments drawn with ``seed``, on ``device`` when given: get_inputs() makes its
    tensors there (a problem's inputs of several GB are drawn on the GPU in milliseconds, not
    on one CPU thread and copied over), with that device's generator seeded and restored."""
    _set_sizes(shape)
    where = None if device is None else torch.device(device)
    gpus = []
    if where is not None and where.type == "cuda":
        gpus = [where.index if where.index is not None else torch.cuda.current_device()]
    with torch.random.fork_rng(devices=gpus), (where or contextlib.nullcontext()):
        torch.manual_seed(seed)
        return list(_problem.get_inputs())


def _described_all(shape, args, model, results):
    init = [_describe(v, f"get_init_inputs()[{i}]", False)
            for i, v in enumerate(_init_values(shape))]
    state = [{"name": n, "shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")}
             for n, t in _state(model)]
    outputs = [_describe(t, "an output", True) for t in results]
    tensors = [*(a for a in args if isinstance(a, torch.Tensor)),
               *(t for _, t in _state(model)), *results]
    return {"args": [_describe(a, f"get_inputs()[{i}]", True) for i, a in enumerate(args)],
            "init": init, "state": state, "outputs": outputs,
            "bytes": sum(t.numel() * t.element_size() for t in tensors)}


def _init_values(shape):
    _set_sizes(shape)
    return list(_problem.get_init_inputs())


def _counter(flops):
    if not flops:
        return contextlib.nullcontext()
    from torch.utils.flop_counter import FlopCounterMode  # imports torch._dynamo

    return FlopCounterMode(display=False)


def trace(shape, flops=True):
    """What TRACED holds for ``shape``: forward's arguments, the constructor's settings, the
    parameters and results (sizes, dtypes, values), bytes (every tensor read or written once)
    and, with ``flops``, flops (those torch's flop counter knows: matmuls, convolutions, not
    elementwise ops; a lower bound). On the meta device where every op has a meta kernel (no
    compute), for real otherwise (on shapes below 2 GiB)."""
    counter = _counter(flops)
    try:
        with torch.device("meta"):
            model = _model(shape, 0, "meta")
            args = _forward_args(shape, 0)
            with torch.no_grad(), counter:
                results = _as_tuple(model(*args))
    except (NotImplementedError, RuntimeError) as exc:
        if isinstance(exc, RuntimeError) and "meta" not in str(exc).lower():
            raise  # an error of the model at these sizes, not a gap of the meta device
        with torch.device("meta"):
            size = sum(a.numel() * a.element_size() for a in _forward_args(shape, 0)
                       if isinstance(a, torch.Tensor))
        if size > _GUARD_BYTES:
            reason = " ".join(str(exc).split())[:200]
            raise ValueError(f"forward fails on the meta device ({type(exc).__name__}: "
                             f"{reason}), and its inputs ({size >> 20} MiB) are too large to "
                             f"run it for real here") from None
        counter = _counter(flops)
        model, args = _model(shape, 0), _forward_args(shape, 0)
        with torch.no_grad(), counter:
            results = _as_tuple(model(*args))
    traced = _described_all(shape, args, model, results)
    return {**traced, "flops": int(counter.get_total_flops())} if flops else traced


def _label(shape):
    return ",".join(f"{k}={v}" for k, v in sorted(shape.items()))


def _traced(shape, flops=False):
    """TRACED's entry for ``shape``; a shape added by hand (or a check's) is traced here, its
    flops only when asked: a sandbox checks that nothing replaced torch's functions while a
    kernel ran, and the flop counter's first use wraps some (it imports torch._dynamo)."""
    label = _label(shape)
    if label not in TRACED or (flops and "flops" not in TRACED[label]):
        TRACED[label] = trace(shape, flops)
    return TRACED[label]


def _first_shape():
    return (TUNING_SHAPES.get("cpu") or next(iter(TUNING_SHAPES.values())))[0] \\
        if isinstance(TUNING_SHAPES, dict) else TUNING_SHAPES[0]


_FIRST = _traced(_first_shape())
_MODELS = {}
_PARAMETERS = {}


def _scalar_count(entry):
    """How many of make_inputs' tensors one of forward's arguments becomes."""
    if entry["kind"] == "ints":
        return len(entry["value"])
    return 0 if entry["kind"] == "none" else 1


def _setting_kinds(entry):
    if entry["kind"] in _SCALARS:
        return [_SCALARS[entry["kind"]][0]]
    return ["i64"] * len(entry["value"]) if entry["kind"] == "ints" else []


def _arg_kinds(entry):
    return ["ptr"] if entry["kind"] == "tensor" else _setting_kinds(entry)


KERNELS = {
    "cpp": {
        "source": "kernel.cpp",
        "entry": "forward",
        "argtypes": [*(k for e in _FIRST["args"] for k in _arg_kinds(e)),
                     *(k for e in _FIRST["init"] for k in _setting_kinds(e)),
                     *["ptr"] * (len(_FIRST["state"]) + len(_FIRST["outputs"]) + 1)],
        "knobs": {},
    },
}
# A triton kernel (kernel.py, entry point forward) is a starting kernel too when present; its
# knobs are in kernel_knobs.json when there is one (a start generated by torch.compile writes
# its block sizes and warps there).
if Path(__file__).with_name("kernel.py").is_file():
    _KNOBS = Path(__file__).with_name("kernel_knobs.json")
    KERNELS["triton"] = {"source": "kernel.py", "entry": "forward",
                         "knobs": json.loads(_KNOBS.read_text()) if _KNOBS.is_file() else {}}


def _bits(entry, value):
    """A scalar as an int64 (a float as its float64 bits): integer inputs are never scaled by
    the evaluator's large-magnitude checks, so the reference sees the value the kernel gets."""
    if entry["kind"] == "float":
        return struct.unpack("<q", struct.pack("<d", value))[0]
    return int(value)


def _value(entry, bits):
    if entry["kind"] == "float":
        return struct.unpack("<d", struct.pack("<q", bits))[0]
    return bool(bits) if entry["kind"] == "bool" else bits


def _flatten(args, traced):
    """forward's arguments as tensors: scalars as 0-dimensional int64 ones, tuples
    element-wise; a scalar must be the value traced for the shape (the one the kernel gets)."""
    flat = []
    for i, (entry, arg, seen) in enumerate(zip(_FIRST["args"], args, traced, strict=True)):
        if entry["kind"] in ("tensor", "none"):
            flat.extend([arg] if entry["kind"] == "tensor" else [])
            continue
        if _describe(arg, "", True) != seen:
            raise ValueError(f"get_inputs()[{i}] is {arg!r} here but {seen.get('value')!r} when "
                             f"traced: a scalar argument must not depend on the seed")
        values = arg if entry["kind"] == "ints" else [arg]
        flat.extend(torch.tensor(_bits(entry, v), dtype=torch.int64) for v in values)
    return flat


def _unflatten(flat):
    """forward's arguments back from ``_flatten``'s tensors."""
    args, i = [], 0
    for entry in _FIRST["args"]:
        count = _scalar_count(entry)
        if entry["kind"] == "tensor":
            args.append(flat[i])
        elif entry["kind"] == "ints":
            args.append(tuple(int(t.item()) for t in flat[i:i + count]))
        else:
            args.append(None if entry["kind"] == "none" else _value(entry, int(flat[i].item())))
        i += count
    return args, flat[i:]


def make_inputs(shape, seed, device):
    """forward's arguments, the parameters, and last the shape's FIXED values (int64): the
    model the reference runs is built from them (the launchers do not pass them on)."""
    key = (_fixed_key(shape), seed)
    if key not in _PARAMETERS:
        _PARAMETERS[key] = [t.detach().clone() for _, t in _state(_model(shape, seed))]
    forward = _flatten(_forward_args(shape, seed, device), _traced(shape)["args"])
    fixed = torch.tensor(_fixed_key(shape), dtype=torch.int64)
    # forward's tensors are drawn for this call; the parameters are copied every call: a
    # kernel that writes an input must not change the next problem's
    return (*(t.detach().to(device).contiguous() for t in forward),
            *(t.detach().to(device=device, copy=True).contiguous()
              for t in (*_PARAMETERS[key], fixed)))


def make_outputs(shape, device):
    return tuple(torch.empty(e["shape"], dtype=getattr(torch, e["dtype"]), device=device)
                 for e in _traced(shape)["outputs"])


def _placed_model(fixed, device):
    """The model built from the FIXED values ``fixed``, on ``device``."""
    key = (tuple(int(v) for v in fixed.tolist()), str(device))
    if key not in _MODELS:
        _MODELS[key] = copy.deepcopy(_model(dict(zip(FIXED, key[0])), 0)).to(device)
    return _MODELS[key]


def reference(*inputs):
    args, state = _unflatten(list(inputs[:-1]))
    model = _placed_model(inputs[-1], inputs[-1].device)
    names = [name for name, _ in _state(model)]
    with torch.no_grad():
        result = torch.func.functional_call(model, dict(zip(names, state, strict=True)),
                                            tuple(args))
    return _as_tuple(result)


def compile_target(inputs):
    """(fn, positions) for a start generated by torch.compile (``kernelswarm tasks start
    --from-compile``): forward as a function of the tensors ``inputs[p]``, ``p`` in
    ``positions`` (its tensor arguments, then the parameters), with the model (built from the
    last input) and the scalar arguments fixed, as ``reference(*inputs)`` computes it."""
    # torch.compile looks forward's globals up by module name: problem.py must be importable
    sys.modules.setdefault(_problem.__name__, _problem)
    args, state = _unflatten(list(inputs[:-1]))
    model = _placed_model(inputs[-1], inputs[-1].device)
    names = [name for name, _ in _state(model)]
    slots = [k for k, a in enumerate(args) if isinstance(a, torch.Tensor)]
    positions, i = [], 0
    for entry in _FIRST["args"]:
        if entry["kind"] == "tensor":
            positions.append(i)
        i += _scalar_count(entry)
    positions += range(i, i + len(state))

    def forward(*tensors):
        call = list(args)
        for k, tensor in zip(slots, tensors):
            call[k] = tensor
        parameters = dict(zip(names, tensors[len(slots):], strict=True))
        return _as_tuple(torch.func.functional_call(model, parameters, tuple(call)))

    return forward, positions


def _setting_values(shape):
    values = []
    for entry in _traced(shape)["init"]:
        if entry["kind"] in _SCALARS:
            values.append(entry["value"])
        elif entry["kind"] == "ints":
            values.extend(entry["value"])
    return values


def _arguments(inputs, shape):
    """(forward's arguments as a kernel gets them, the parameters): tensors from ``inputs``,
    scalars as traced for ``shape`` (a launcher reads no tensor's data)."""
    arguments, i = [], 0
    for entry in _traced(shape)["args"]:
        if entry["kind"] == "tensor":
            arguments.append(inputs[i])
        elif entry["kind"] == "ints":
            arguments.extend(entry["value"])
        elif entry["kind"] != "none":
            arguments.append(entry["value"])
        i += _scalar_count(entry)
    return arguments, inputs[i:-1]  # the last input is the model's FIXED values


def launch_cpp(fn, inputs, outputs, shape):
    arguments, state = _arguments(inputs, shape)
    tensors = [*(a for a in arguments if isinstance(a, torch.Tensor)), *state, *outputs]
    dims = [d for t in tensors for d in t.shape] or [0]
    # a fresh array each call: a kernel that writes it cannot change the next call's sizes
    sizes = (ctypes.c_int64 * len(dims))(*dims)
    fn(*(a.data_ptr() if isinstance(a, torch.Tensor) else a for a in arguments),
       *_setting_values(shape), *(t.data_ptr() for t in (*state, *outputs)), sizes)


def launch_triton(fn, inputs, outputs, shape):
    """forward(*arguments, *settings, *parameters, *outputs): the cpp order without the sizes,
    scalars as Python numbers and tuples flattened."""
    arguments, state = _arguments(inputs, shape)
    fn(*arguments, *_setting_values(shape), *state, *outputs)


def roofline(shape):
    """(bytes, flops) from TRACED; see trace()."""
    traced = _traced(shape, flops=True)
    return traced["bytes"], traced["flops"]


''' + SIGNATURE_PY)

STUB_CPP = Template('''\
// KernelBench problem $name: write the kernel here (it must compute Model.forward of
// problem.py; `kernelswarm tasks check . --evaluate` runs it against the reference).
// Arguments: forward's inputs, the constructor's settings, the model's parameters, the
// outputs, then the sizes of every tensor (task.py's docstring has the rules).
#include <stdint.h>

$signature {
}
''')
