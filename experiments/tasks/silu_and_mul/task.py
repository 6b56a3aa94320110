"""silu_and_mul: out = silu(x[:, :d]) * x[:, d:] for x of shape [tokens, 2d].

The gated activation of LLaMA-style MLPs, as serving frameworks fuse it after the up-projection.
"""

import torch
import torch.nn.functional as F

NAME = "silu_and_mul"
DESCRIPTION = __doc__

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

# Small enough for a 2-core CPU search; the GPU suite adds decode/prefill sizes at LLaMA widths.
TUNING_SHAPES = [
    {"tokens": 1, "d": 4096, "dtype": "float32"},
    {"tokens": 16, "d": 4096, "dtype": "float32"},
    {"tokens": 64, "d": 2048, "dtype": "float32"},
]
# Odd and non-power-of-two sizes, never seen during the search.
HELDOUT_SHAPES = [
    {"tokens": 3, "d": 1000, "dtype": "float32"},
    {"tokens": 7, "d": 4099, "dtype": "float32"},
]

TOLERANCES = {
    "float32": {"atol": 1e-5, "rtol": 1e-5},
    "float16": {"atol": 1e-3, "rtol": 1e-3},
    "bfloat16": {"atol": 1e-2, "rtol": 1e-2},
}

KERNELS = {
    "cpp": {
        "source": "silu_and_mul.cpp",
        "entry": "silu_and_mul",
        "argtypes": ["ptr", "ptr", "i64", "i64"],
        "knobs": {},
    },
    "triton": {
        "source": "silu_and_mul_triton.py",
        "entry": "silu_and_mul",
        "knobs": {"BLOCK": [1024, 256, 512, 2048, 4096]},
    },
    "torch-ext": {
        "source": "silu_and_mul_ext.cpp",
        "entry": "silu_and_mul",
        "knobs": {},
    },
}


def make_inputs(shape, seed, device):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape["tokens"], 2 * shape["d"], generator=g, dtype=torch.float32)
    return (x.to(device=device, dtype=_DTYPES[shape["dtype"]]),)


def make_outputs(shape, device):
    return (torch.empty(shape["tokens"], shape["d"], dtype=_DTYPES[shape["dtype"]], device=device),)


def reference(x):
    d = x.shape[-1] // 2
    return (F.silu(x[..., :d]) * x[..., d:],)


def launch_cpp(fn, inputs, outputs, shape):
    (x,), (out,) = inputs, outputs
    fn(out.data_ptr(), x.data_ptr(), shape["tokens"], shape["d"])


def launch_triton(fn, inputs, outputs, shape):
    # fn: the module's entry point, a Python function that launches its @triton.jit kernels
    (x,), (out,) = inputs, outputs
    fn(out, x, shape["tokens"], shape["d"])


def launch_torch_ext(fn, inputs, outputs, shape):
    # fn: the extension's bound function; it takes the tensors and reads the sizes off them
    (x,), (out,) = inputs, outputs
    fn(out, x)


def roofline(shape):
    size = torch.empty((), dtype=_DTYPES[shape["dtype"]]).element_size()
    elements = shape["tokens"] * shape["d"]
    moved = 3 * elements * size  # read both halves, write the product
    flops = 4 * elements  # negate-exp counted as one, add, divide, multiply
    return moved, flops
