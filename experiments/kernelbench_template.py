"""The ``task.py`` that ``kernelswarm tasks import-kernelbench`` writes beside a problem file.

Kept as text (it imports torch, which only task files may) with ``$``-placeholders for what
differs between problems: ``$name``, ``$origin``, ``$tuning``, ``$heldout``, ``$fixed`` and
``$traced`` (the figures ``trace()`` in the written file gives for each shape).
"""

from __future__ import annotations

from string import Template

TASK_PY = Template('''\
"""KernelBench problem $name, imported from $origin.

The reference is ``Model.forward`` of problem.py (a copy of the problem file), the model built
from ``get_init_inputs()`` and run in eval mode. A shape sets the problem's integer constants
before ``get_inputs()`` runs; the constants the model is built from (FIXED) keep the file's
values in every shape; edit problem.py to change those.

Inputs, in order: the tensors of ``get_inputs()`` (drawn with the problem's seed), then the
model's parameters and floating-point buffers (``named_parameters()``, then ``named_buffers()``,
drawn with SEED + the problem's seed). Outputs: the result(s) of ``forward``.

cpp calling contract (``c_signature()`` prints it for this problem):

    extern "C" void forward(<inputs>, <outputs>, const int64_t* sizes);

each tensor a pointer to its contiguous data in its own dtype; ``sizes`` holds the dimensions of
every input, then of every output, in that order.
"""

import copy
import ctypes
import importlib.util
import inspect
from pathlib import Path

import torch

NAME = $name
DESCRIPTION = __doc__

TUNING_SHAPES = $tuning
HELDOUT_SHAPES = $heldout
# Constants the model is built from: the same in every shape.
FIXED = $fixed
# Per shape label, from trace() when the folder was written, so that loading the task runs
# nothing but the model's constructor. A shape missing here is traced when first used.
TRACED = $traced

# KernelBench itself allows 1e-2; a float32 kernel that only sums in another order stays well
# inside these.
TOLERANCES = {
    "float32": {"atol": 1e-4, "rtol": 1e-4},
    "float16": {"atol": 1e-3, "rtol": 1e-3},
    "bfloat16": {"atol": 1e-2, "rtol": 1e-2},
}
SEED = 0

_C_TYPES = {"float32": "float", "float64": "double", "float16": "uint16_t",
            "bfloat16": "uint16_t", "int64": "int64_t", "int32": "int32_t", "int16": "int16_t",
            "int8": "int8_t", "uint8": "uint8_t", "bool": "bool"}


def _load_problem():
    path = Path(__file__).with_name("problem.py")
    spec = importlib.util.spec_from_file_location(f"kernelbench_problem_{abs(hash(str(path))):x}",
                                                  path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_problem = _load_problem()


def _all_shapes():
    for shapes in (TUNING_SHAPES, HELDOUT_SHAPES):
        yield from (s for group in shapes.values() for s in group)


for _shape in _all_shapes():
    for _name in FIXED:
        if _name in _shape and _shape[_name] != getattr(_problem, _name):
            raise ValueError(f"shape {_shape}: {_name} is a constant the model is built from; "
                             f"it must keep problem.py's value {getattr(_problem, _name)}")


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


def _new_model(seed):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED + seed)
        return _problem.Model(*_problem.get_init_inputs()).eval()


def _state(model):
    """The tensors a kernel gets besides forward's arguments, as (name, tensor)."""
    buffers = [(n, b) for n, b in model.named_buffers() if b.is_floating_point()]
    return [*model.named_parameters(), *buffers]


_SKELETON = _new_model(0)
_STATE_NAMES = [name for name, _ in _state(_SKELETON)]
_PLACED = {}
_PARAMETERS = {}


def _forward_inputs(shape, seed):
    _set_sizes(shape)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        args = list(_problem.get_inputs())
    for i, arg in enumerate(args):
        if not isinstance(arg, torch.Tensor):
            raise TypeError(f"get_inputs()[{i}] is a {type(arg).__name__}; only tensors can be "
                            f"passed to a kernel")
    return args


def _described(tensors):
    return [[list(t.shape), str(t.dtype).removeprefix("torch.")] for t in tensors]


def trace(shape):
    """What TRACED holds for ``shape``: forward's arguments and results (sizes, dtypes), bytes
    (every input read once, every output written once) and flops (those torch's flop counter
    knows: matmuls, convolutions, not elementwise ops; so a lower bound). Traced on the meta
    device where every op has a meta kernel (no compute), for real otherwise."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    try:
        _set_sizes(shape)
        with torch.device("meta"):
            model = _problem.Model(*_problem.get_init_inputs()).eval()
            args = list(_problem.get_inputs())
            with torch.no_grad(), counter:
                results = _as_tuple(model(*args))
    except (NotImplementedError, RuntimeError):
        counter = FlopCounterMode(display=False)
        args = _forward_inputs(shape, 0)
        with torch.no_grad(), counter:
            results = _as_tuple(_SKELETON(*args))
    tensors = [*args, *(t for _, t in _state(_SKELETON)), *results]
    return {"args": _described(args), "outputs": _described(results),
            "bytes": sum(t.numel() * t.element_size() for t in tensors),
            "flops": int(counter.get_total_flops())}


def _traced(shape):
    label = ",".join(f"{k}={v}" for k, v in sorted(shape.items()))
    if label not in TRACED:  # a shape added by hand: trace it here (slower to load)
        TRACED[label] = trace(shape)
    return TRACED[label]


def _first_shape():
    return (TUNING_SHAPES.get("cpu") or next(iter(TUNING_SHAPES.values())))[0]


_FIRST = _traced(_first_shape())
_N_FORWARD = len(_FIRST["args"])

KERNELS = {
    "cpp": {
        "source": "kernel.cpp",
        "entry": "forward",
        "argtypes": ["ptr"] * (_N_FORWARD + len(_STATE_NAMES) + len(_FIRST["outputs"]) + 1),
        "knobs": {},
    },
}


def make_inputs(shape, seed, device):
    if seed not in _PARAMETERS:
        _PARAMETERS[seed] = [t.detach().clone() for _, t in _state(_new_model(seed))]
    tensors = [*_forward_inputs(shape, seed), *_PARAMETERS[seed]]
    # a copy every call: a kernel that writes an input must not change the next problem's
    return tuple(t.detach().to(device=device, copy=True).contiguous() for t in tensors)


def make_outputs(shape, device):
    return tuple(torch.empty(size, dtype=getattr(torch, dtype), device=device)
                 for size, dtype in _traced(shape)["outputs"])


def reference(*inputs):
    args, state = inputs[:_N_FORWARD], inputs[_N_FORWARD:]
    device = inputs[0].device
    if device not in _PLACED:
        _PLACED[device] = copy.deepcopy(_SKELETON).to(device)
    with torch.no_grad():
        result = torch.func.functional_call(_PLACED[device], dict(zip(_STATE_NAMES, state, strict=True)),
                                            tuple(args))
    return _as_tuple(result)


def launch_cpp(fn, inputs, outputs, shape):
    tensors = (*inputs, *outputs)
    dims = [d for t in tensors for d in t.shape] or [0]
    # a fresh array each call: a kernel that writes it cannot change the next call's sizes
    sizes = (ctypes.c_int64 * len(dims))(*dims)
    fn(*(t.data_ptr() for t in tensors), sizes)


def roofline(shape):
    """(bytes, flops) from TRACED; see trace()."""
    traced = _traced(shape)
    return traced["bytes"], traced["flops"]


def _forward_names():
    parameters = list(inspect.signature(_problem.Model.forward).parameters.values())[1:]
    named = [p.name for p in parameters
             if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return [named[i] if i < len(named) else f"in{i}" for i in range(_N_FORWARD)]


def c_signature():
    """The cpp entry point for this problem, each parameter commented with its sizes."""
    state = _described(t for _, t in _state(_SKELETON))
    outputs = _FIRST["outputs"]
    names = [*_forward_names(), *(n.replace(".", "_") for n in _STATE_NAMES),
             *(f"out{i}" for i in range(len(outputs)))]
    roles = ["input"] * _N_FORWARD + ["parameter"] * len(state) + ["output"] * len(outputs)
    rows = zip(names, [*_FIRST["args"], *state, *outputs], roles, strict=True)
    lines, offset = [], 0
    for name, (dims, dtype), role in rows:
        const = "" if role == "output" else "const "
        where = {0: "no sizes", 1: f"sizes[{offset}]"}.get(
            len(dims), f"sizes[{offset}..{offset + len(dims) - 1}]")
        lines.append(f"    {const}{_C_TYPES.get(dtype, 'void')}* {name},"
                     f"  // {role} {name}: {where} = {dims}")
        offset += len(dims)
    return 'extern "C" void forward(\\n' + "\\n".join(lines) + "\\n    const int64_t* sizes)"
''')

STUB_CPP = Template('''\
// KernelBench problem $name: write the kernel here (it must compute Model.forward of
// problem.py; `kernelswarm tasks check . --evaluate` runs it against the reference).
#include <stdint.h>

$signature {
}
''')
