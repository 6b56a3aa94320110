"""The task folder that ``kernelswarm tasks new NAME`` writes: a small elementwise op to adapt.

``out = alpha * x + y`` over vectors: two inputs, one output, a scalar parameter and a size, so
that every part of the format appears once. ``$name`` is the task's name, which is also the C
entry point and the source file's stem.
"""

from __future__ import annotations

from string import Template

TASK_PY = Template('''\
"""$name: out = alpha * x + y for vectors x, y of n elements.

A scaffold from `kernelswarm tasks new`: replace the op with yours. Keep `make_inputs`,
`make_outputs`, `reference`, `launch_cpp` and the cpp kernel in agreement, and check the folder
with `kernelswarm tasks check <this folder> --evaluate`. docs/tasks.md describes every name.
"""

import torch

NAME = "$name"
DESCRIPTION = __doc__

ALPHA = 0.5  # a scalar the kernel receives as an argument (f32)

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

# Shapes per device: "cpu" ones small enough to evaluate in seconds; add "cuda" ones (and a
# "cuda" kernel) for a GPU. Every shape names its dtype, which TOLERANCES must have.
TUNING_SHAPES = {
    "cpu": [{"n": 4096, "dtype": "float32"},
            {"n": 65536, "dtype": "float32"},
            {"n": 1048576, "dtype": "float32"}],
}
# Never tuned on; odd sizes catch kernels that assume a multiple of their vector width.
HELDOUT_SHAPES = {
    "cpu": [{"n": 1000, "dtype": "float32"},
            {"n": 4099, "dtype": "float32"}],
}

TOLERANCES = {
    "float32": {"atol": 1e-6, "rtol": 1e-6},
    "float16": {"atol": 1e-3, "rtol": 1e-3},
    "bfloat16": {"atol": 1e-2, "rtol": 1e-2},
}

KERNELS = {
    "cpp": {
        "source": "$name.cpp",
        "entry": "$name",
        "argtypes": ["ptr", "ptr", "ptr", "i64", "f32"],  # out, x, y, n, alpha
        "knobs": {},
    },
}


def make_inputs(shape, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = _DTYPES[shape["dtype"]]
    x = torch.randn(shape["n"], generator=g, device=device)
    y = torch.randn(shape["n"], generator=g, device=device)
    return x.to(dtype), y.to(dtype)


def make_outputs(shape, device):
    return (torch.empty(shape["n"], dtype=_DTYPES[shape["dtype"]], device=device),)


def reference(x, y):
    return (ALPHA * x + y,)


def launch_cpp(fn, inputs, outputs, shape):
    (x, y), (out,) = inputs, outputs
    fn(out.data_ptr(), x.data_ptr(), y.data_ptr(), shape["n"], ALPHA)


def roofline(shape):
    size = _DTYPES[shape["dtype"]].itemsize
    moved = 3 * shape["n"] * size  # read x and y, write out
    flops = 2 * shape["n"]  # a multiply and an add per element
    return moved, flops
''')

KERNEL_CPP = Template('''\
// $name, float32: out[i] = alpha * x[i] + y[i]. A plain first version: one scalar loop.
#include <stdint.h>

extern "C" void $name(float* out, const float* x, const float* y, int64_t n, float alpha) {
    for (int64_t i = 0; i < n; ++i) out[i] = alpha * x[i] + y[i];
}
''')
