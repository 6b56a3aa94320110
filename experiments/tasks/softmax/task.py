"""softmax: out[r, :] = exp(x[r, :] - max(x[r, :])) / sum(exp(x[r, :] - max(x[r, :]))).

Row-wise softmax over the last dimension of ``x[rows, cols]``, the activation of a CuTeGen-style
workload suite (attention probabilities, sampling over a vocabulary). Subtracting the row's
maximum keeps every exponent <= 0, so no row overflows; the maximum, the exponentials and their
sum are float32 whatever the storage dtype, and each output is rounded once.
"""

import torch

NAME = "softmax"
DESCRIPTION = __doc__

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
_SCALE = 4.0  # logits spread over a few units: the maximum matters, and exp underflows in places


def _grid(rows, cols, dtypes):
    return [{"rows": r, "cols": c, "dtype": d} for d in dtypes for c in cols for r in rows]


# cpu: float32 sizes a 2-core machine evaluates in seconds. cuda: decode and prefill row counts at
# LLaMA-7B/13B/70B widths and LLaMA's vocabulary (32000), bf16 and float32 logits.
TUNING_SHAPES = {
    "cpu": _grid([1, 16, 64], [4096], ["float32"]) + _grid([8], [32000], ["float32"]),
    "cuda": _grid([1, 16, 128, 1024, 8192], [4096, 5120, 8192], ["bfloat16"])
    + _grid([1, 128], [32000], ["bfloat16", "float32"]),
}
# Odd row counts and widths that are not multiples of a vector width.
HELDOUT_SHAPES = {
    "cpu": [{"rows": 3, "cols": 1000, "dtype": "float32"},
            {"rows": 7, "cols": 4099, "dtype": "float32"},
            {"rows": 67, "cols": 16411, "dtype": "float32"}],
    "cuda": [{"rows": 7, "cols": 4096, "dtype": "bfloat16"},
             {"rows": 333, "cols": 5120, "dtype": "bfloat16"},
             {"rows": 17, "cols": 32003, "dtype": "float32"},
             {"rows": 1000, "cols": 1001, "dtype": "bfloat16"},
             {"rows": 8195, "cols": 1001, "dtype": "bfloat16"}],
}

# Outputs lie in [0, 1]; a float32 sum of 32000 terms taken in sequence can be off by ~1e-4
# relative, and that error scales a whole row.
TOLERANCES = {
    "float32": {"atol": 1e-6, "rtol": 1e-3},
    "float16": {"atol": 1e-4, "rtol": 2e-3},
    "bfloat16": {"atol": 1e-3, "rtol": 1e-2},
}

KERNELS = {
    "cpp": {
        "source": "softmax.cpp",
        "entry": "softmax",
        "argtypes": ["ptr", "ptr", "i64", "i64"],  # out, x, rows, cols
        "knobs": {},
    },
    "cuda": {
        "source": "softmax.cu",
        "entry": "softmax_bf16",
        "knobs": {"BLOCK": [256, 128, 512, 1024]},
    },
    "triton": {
        "source": "softmax_triton.py",
        "entry": "softmax",
        "knobs": {"BLOCK": [4096, 1024, 2048, 8192], "ROWS": [4, 1, 2, 8]},
    },
}
_CUDA_KERNELS = {torch.bfloat16: "softmax_bf16", torch.float32: "softmax_f32"}


def make_inputs(shape, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    x = _SCALE * torch.randn(shape["rows"], shape["cols"], generator=g, device=device)
    return (x.to(_DTYPES[shape["dtype"]]),)


def make_outputs(shape, device):
    return (torch.empty(shape["rows"], shape["cols"], dtype=_DTYPES[shape["dtype"]],
                        device=device),)


def reference(x):
    return (torch.softmax(x.float(), dim=-1).to(x.dtype),)


def launch_cpp(fn, inputs, outputs, shape):
    (x,), (out,) = inputs, outputs
    fn(out.data_ptr(), x.data_ptr(), shape["rows"], shape["cols"])


def launch_cuda(fn, inputs, outputs, shape):
    # One block per row; the BLOCK knob is the block size the kernel was compiled for.
    (x,), (out,) = inputs, outputs
    kernel = fn.kernel(_CUDA_KERNELS[x.dtype])
    block = int(fn.knobs.get("BLOCK", 256))
    kernel(shape["rows"], block, out, x, shape["cols"])


def launch_triton(fn, inputs, outputs, shape):
    # fn: the module's entry point, a Python function that launches its @triton.jit kernels
    (x,), (out,) = inputs, outputs
    fn(out, x, shape["rows"], shape["cols"])


def roofline(shape):
    size = _DTYPES[shape["dtype"]].itemsize
    elements = shape["rows"] * shape["cols"]
    moved = 2 * elements * size  # read x once, write out once (a row fits on chip)
    flops = 5 * elements  # per element: max, subtract, exp, add to the sum, scale by 1/sum
    return moved, flops
