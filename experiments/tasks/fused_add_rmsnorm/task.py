"""fused_add_rmsnorm: residual += x, then x = rmsnorm(residual) * weight, over rows of [tokens, hidden].

The pre-norm step of every LLaMA-style decoder layer as serving frameworks fuse it: the layer's
output is added into the residual stream, and the sum is RMS-normalised for the next layer. The
sum and the sum of squares are taken in float32 whatever the storage dtype; the normalised row is
scaled by ``weight`` in float32 and rounded to the dtype once.

Calling contract. Serving frameworks run this op in place (``x`` and ``residual`` are both
overwritten). The evaluator checks outputs and inputs separately: outputs are poisoned before each
call and must be fully written, inputs must be bit-for-bit unchanged after it. An in-place kernel
would fail the second rule and could pass the first without computing anything, so the kernel
here reads ``(x, residual, weight)`` and writes two separate outputs ``(x_out, residual_out)``.
The arithmetic is the same; a GPU kernel that runs in place in production is this kernel called
with ``x_out`` aliasing ``x`` and ``residual_out`` aliasing ``residual`` (each element is read
before it is written, by the thread that writes it).
"""

import torch

NAME = "fused_add_rmsnorm"
DESCRIPTION = __doc__

EPS = 1e-6  # LLaMA-2's rms_norm_eps

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _grid(tokens, hiddens, dtypes):
    return [{"tokens": t, "hidden": h, "dtype": d} for d in dtypes for h in hiddens for t in tokens]


# cpu: float32 sizes a 2-core machine evaluates in seconds. cuda: decode (1, 16) and prefill
# (128 .. 8192) token counts at LLaMA-7B/13B/70B hidden sizes, bf16 everywhere, fp16 on a subset.
TUNING_SHAPES = {
    "cpu": _grid([1, 16, 64], [4096], ["float32"]) + _grid([32], [2048], ["float32"]),
    "cuda": _grid([1, 16, 128, 1024, 8192], [4096, 5120, 8192], ["bfloat16"])
    + _grid([16, 1024], [4096, 8192], ["float16"]),
}
# Odd token counts and hidden sizes that are not multiples of a vector width.
HELDOUT_SHAPES = {
    "cpu": [{"tokens": 3, "hidden": 1000, "dtype": "float32"},
            {"tokens": 7, "hidden": 4099, "dtype": "float32"},
            {"tokens": 67, "hidden": 515, "dtype": "float32"}],
    "cuda": [{"tokens": 7, "hidden": 4096, "dtype": "bfloat16"},
             {"tokens": 333, "hidden": 5120, "dtype": "float16"},
             {"tokens": 17, "hidden": 4099, "dtype": "bfloat16"},
             {"tokens": 1000, "hidden": 1001, "dtype": "bfloat16"},
             {"tokens": 8195, "hidden": 8197, "dtype": "bfloat16"}],
}

# float32 allows for a sum of squares accumulated in another order over a few thousand terms;
# the 16-bit dtypes allow one rounding step of the output.
TOLERANCES = {
    "float32": {"atol": 1e-5, "rtol": 1e-4},
    "float16": {"atol": 1e-3, "rtol": 1e-3},
    "bfloat16": {"atol": 1e-2, "rtol": 1e-2},
}

KERNELS = {
    "cpp": {
        "source": "fused_add_rmsnorm.cpp",
        "entry": "fused_add_rmsnorm",
        # x_out, residual_out, x, residual, weight, tokens, hidden, eps
        "argtypes": ["ptr", "ptr", "ptr", "ptr", "ptr", "i64", "i64", "f32"],
        "knobs": {},
    },
    "cuda": {
        "source": "fused_add_rmsnorm.cu",
        "entry": "fused_add_rmsnorm_bf16",
        "knobs": {"BLOCK": [256, 64, 128, 512, 1024]},
    },
    "triton": {
        "source": "fused_add_rmsnorm_triton.py",
        "entry": "fused_add_rmsnorm",
        "knobs": {"BLOCK": [4096, 1024, 2048, 8192], "ROWS": [4, 1, 2, 8]},
    },
    "cute": {
        "source": "fused_add_rmsnorm_cute.cu",
        "entry": "fused_add_rmsnorm_bf16",
        "knobs": {"BLOCK": [256, 128, 512, 1024], "VEC": [8, 4, 2], "ITEMS": [4, 2, 8]},
    },
}
_CUDA_KERNELS = {torch.bfloat16: "fused_add_rmsnorm_bf16", torch.float16: "fused_add_rmsnorm_f16"}

# Library kernels users run in production, timed as baselines where installed and skipped (with
# the reason) where not; each is checked against `reference` before it counts. `call` names the
# adapter below: (the imported module, *inputs) -> outputs as `reference` returns them.
ANCHORS = {
    "liger": {"package": "liger-kernel", "module": "liger_kernel.ops.fused_add_rms_norm",
              "call": "anchor_liger", "devices": ["cuda"]},
    "flashinfer": {"package": "flashinfer-python", "module": "flashinfer",
                   "call": "anchor_in_place", "devices": ["cuda"]},
    "sgl-kernel": {"package": "sgl-kernel", "module": "sgl_kernel",
                   "call": "anchor_in_place", "devices": ["cuda"]},
}


def make_inputs(shape, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    dtype, size = _DTYPES[shape["dtype"]], (shape["tokens"], shape["hidden"])
    x = torch.randn(size, generator=g, device=device)
    residual = torch.randn(size, generator=g, device=device)
    weight = 1.0 + 0.1 * torch.randn(shape["hidden"], generator=g, device=device)
    return x.to(dtype), residual.to(dtype), weight.to(dtype)


def make_outputs(shape, device):
    dtype, size = _DTYPES[shape["dtype"]], (shape["tokens"], shape["hidden"])
    return (torch.empty(size, dtype=dtype, device=device),
            torch.empty(size, dtype=dtype, device=device))


def reference(x, residual, weight):
    total = x.float() + residual.float()
    inv_rms = torch.rsqrt(total.pow(2).mean(dim=-1, keepdim=True) + EPS)
    x_out = (total * inv_rms * weight.float()).to(x.dtype)
    return x_out, total.to(x.dtype)


def anchor_liger(lib, x, residual, weight):
    # Liger's forward (offset 0, LLaMA casting: the inverse RMS in float32) returns (y, sum, ...)
    out = lib.fused_add_rms_norm_forward(x, residual, weight, EPS, 0.0, "llama")
    return out[0], out[1]


def anchor_in_place(lib, x, residual, weight):
    # FlashInfer's and sgl-kernel's fused_add_rmsnorm work in place: residual += x, then
    # x = rmsnorm(residual) * weight; the timing copies are overwritten, which costs the same
    lib.fused_add_rmsnorm(x, residual, weight, EPS)
    return x, residual


def launch_cpp(fn, inputs, outputs, shape):
    (x, residual, weight), (x_out, residual_out) = inputs, outputs
    fn(x_out.data_ptr(), residual_out.data_ptr(), x.data_ptr(), residual.data_ptr(),
       weight.data_ptr(), shape["tokens"], shape["hidden"], EPS)


def launch_cuda(fn, inputs, outputs, shape):
    # One block per token; the BLOCK knob is the block size the kernel was compiled for. With
    # ROWS (the warp_rows structure): one warp per token, ROWS per block, the token count last.
    (x, residual, weight), (x_out, residual_out) = inputs, outputs
    kernel = fn.kernel(_CUDA_KERNELS[x.dtype])
    if "ROWS" in fn.knobs:
        rows, tokens = int(fn.knobs["ROWS"]), shape["tokens"]
        kernel(-(-tokens // rows), (32, rows), x_out, residual_out, x, residual, weight,
               shape["hidden"], EPS, tokens)
        return
    block = int(fn.knobs.get("BLOCK", 256))
    kernel(shape["tokens"], block, x_out, residual_out, x, residual, weight, shape["hidden"], EPS)


def launch_cute(fn, inputs, outputs, shape):
    # One block of BLOCK threads per token (up to 65535 blocks, which then loop over the rest).
    # A row of up to BLOCK * ITEMS VEC-element vectors stays in registers; a longer one (or one
    # whose length is not a multiple of VEC) keeps its float sums in shared memory: hidden floats
    (x, residual, weight), (x_out, residual_out) = inputs, outputs
    kernel = fn.kernel(_CUDA_KERNELS[x.dtype])
    block, tokens, hidden = int(fn.knobs.get("BLOCK", 256)), shape["tokens"], shape["hidden"]
    vec, items = int(fn.knobs.get("VEC", 8)), int(fn.knobs.get("ITEMS", 4))
    in_registers = hidden % vec == 0 and hidden // vec <= block * items
    kernel(min(tokens, 65535), block, x_out, residual_out, x, residual, weight, hidden, EPS,
           tokens, shared_mem=0 if in_registers else 4 * hidden)


def launch_triton(fn, inputs, outputs, shape):
    # fn: the module's entry point, a Python function that launches its @triton.jit kernels
    (x, residual, weight), (x_out, residual_out) = inputs, outputs
    fn(x_out, residual_out, x, residual, weight, shape["tokens"], shape["hidden"], EPS)


def roofline(shape):
    size = _DTYPES[shape["dtype"]].itemsize
    elements = shape["tokens"] * shape["hidden"]
    # read x and residual, write x_out and residual_out; weight is read once
    moved = (4 * elements + shape["hidden"]) * size
    # per element: add, square, accumulate, scale by 1/rms, multiply by weight (the per-row
    # rsqrt is negligible and not counted)
    flops = 5 * elements
    return moved, flops
