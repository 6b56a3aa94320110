"""silu_and_mul: out = silu(x[:, :d]) * x[:, d:] for x of shape [tokens, 2d].

The gated activation of LLaMA-style MLPs, as serving frameworks fuse it after the up-projection.
"""

import torch
import torch.nn.functional as F

NAME = "silu_and_mul"
DESCRIPTION = __doc__

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

# Per device kind. CPU: small enough for a 2-core search. CUDA: decode (1, 16 tokens) and
# prefill (128 to 4096 tokens) at LLaMA MLP widths (11008: 7B, 13824: 13B, 14336: Llama-3 8B,
# 28672: 70B), mostly bf16 with one fp16 shape; six shapes keep an evaluation short.
TUNING_SHAPES = {
    "cpu": [
        {"tokens": 1, "d": 4096, "dtype": "float32"},
        {"tokens": 16, "d": 4096, "dtype": "float32"},
        {"tokens": 64, "d": 2048, "dtype": "float32"},
    ],
    "cuda": [
        {"tokens": 1, "d": 11008, "dtype": "bfloat16"},
        {"tokens": 16, "d": 13824, "dtype": "bfloat16"},
        {"tokens": 128, "d": 28672, "dtype": "bfloat16"},
        {"tokens": 1024, "d": 11008, "dtype": "bfloat16"},
        {"tokens": 4096, "d": 14336, "dtype": "bfloat16"},
        {"tokens": 64, "d": 11008, "dtype": "float16"},
    ],
}
# Odd and non-power-of-two sizes, never seen during the search: they catch kernels that assume
# a row length divisible by their vector width or a token count divisible by their tile.
HELDOUT_SHAPES = {
    "cpu": [
        {"tokens": 3, "d": 1000, "dtype": "float32"},
        {"tokens": 7, "d": 4099, "dtype": "float32"},
        {"tokens": 67, "d": 515, "dtype": "float32"},
    ],
    "cuda": [
        {"tokens": 3, "d": 11001, "dtype": "bfloat16"},
        {"tokens": 257, "d": 5120, "dtype": "bfloat16"},
        {"tokens": 37, "d": 4099, "dtype": "float16"},
        {"tokens": 4099, "d": 16411, "dtype": "bfloat16"},
    ],
}

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
    "cuda": {
        "source": "silu_and_mul.cu",
        "entry": "silu_and_mul_bf16",
        "knobs": {"BLOCK": [256, 64, 128, 512, 1024]},
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
    "cute": {
        "source": "silu_and_mul_cute.cu",
        "entry": "silu_and_mul_bf16",
        "knobs": {"BLOCK": [256, 128, 512, 1024], "VEC": [8, 4, 2], "ITEMS": [1, 2, 4]},
    },
}
_CUDA_KERNELS = {torch.bfloat16: "silu_and_mul_bf16", torch.float16: "silu_and_mul_f16"}

# Library kernels users run in production, timed as baselines where installed and skipped (with
# the reason) where not; each is checked against `reference` before it counts. `call` names the
# adapter below: (the imported module, *inputs) -> outputs as `reference` returns them.
ANCHORS = {
    "liger": {"package": "liger-kernel", "module": "liger_kernel.ops.swiglu",
              "call": "anchor_liger", "devices": ["cuda"]},
    "flashinfer": {"package": "flashinfer-python", "module": "flashinfer",
                   "call": "anchor_silu_and_mul", "devices": ["cuda"]},
    "sgl-kernel": {"package": "sgl-kernel", "module": "sgl_kernel",
                   "call": "anchor_silu_and_mul", "devices": ["cuda"]},
}


def make_inputs(shape, seed, device):
    # Drawn on the device itself: the same seed gives the same tensor there, and the largest
    # GPU shapes would take seconds to draw on the CPU.
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(shape["tokens"], 2 * shape["d"], generator=g, dtype=torch.float32,
                    device=device)
    return (x.to(dtype=_DTYPES[shape["dtype"]]),)


def make_outputs(shape, device):
    return (torch.empty(shape["tokens"], shape["d"], dtype=_DTYPES[shape["dtype"]], device=device),)


def reference(x):
    d = x.shape[-1] // 2
    return (F.silu(x[..., :d]) * x[..., d:],)


def anchor_liger(lib, x):
    # Liger's SwiGLU over the fused [gate | up] tensor; older releases take the halves apart
    if hasattr(lib, "swiglu_fused_gate_up_forward"):
        return (lib.swiglu_fused_gate_up_forward(x)[1],)
    d = x.shape[-1] // 2
    return (lib.swiglu_forward(x[..., :d], x[..., d:])[2],)


def anchor_silu_and_mul(lib, x):
    # FlashInfer's and sgl-kernel's silu_and_mul(input) -> out, same layout as ours
    return (lib.silu_and_mul(x),)


def launch_cpp(fn, inputs, outputs, shape):
    (x,), (out,) = inputs, outputs
    fn(out.data_ptr(), x.data_ptr(), shape["tokens"], shape["d"])


# Blocks per SM the SPLIT geometry aims for when rows are few; the SM count is the GPU's own
# (fn.device.sm_count, read from its driver), not a figure assumed for one machine.
_BLOCKS_PER_SM = 4


def launch_cuda(fn, inputs, outputs, shape):
    # One block per token, of BLOCK threads. Geometry knobs (docs/tasks.md): with SPLIT, up to
    # SPLIT blocks share a token along grid.y, as many as bring the grid to _BLOCKS_PER_SM per SM
    # of this GPU and no more than the row has BLOCK * VEC-element steps for.
    (x,), (out,) = inputs, outputs
    kernel = fn.kernel(_CUDA_KERNELS[x.dtype])
    block = int(fn.knobs.get("BLOCK", 256))
    tokens, d = shape["tokens"], shape["d"]
    if "WAVES" in fn.knobs:  # the stream structure: a grid sized to the GPU, tokens passed last
        resident = fn.device.blocks_per_sm(block, kernel.registers)
        needed = -(-tokens * d // (block * (16 // x.element_size())))
        grid = max(1, min(needed, int(fn.knobs["WAVES"]) * resident * fn.device.sm_count))
        kernel(grid, block, out, x, d, tokens)
        return
    split = int(fn.knobs.get("SPLIT", 1))
    if split > 1:
        steps = -(-d // (block * int(fn.knobs.get("VEC", 1))))
        target = _BLOCKS_PER_SM * fn.device.sm_count
        split = max(1, min(split, steps, -(-target // tokens)))
    kernel((tokens, split) if split > 1 else tokens, block, out, x, d)


def launch_cute(fn, inputs, outputs, shape):
    # grid (blocks along a row, rows): each thread ITEMS VEC-element vectors of its row (one
    # element where d is not a multiple of VEC); rows past the grid's 65535 loop inside
    (x,), (out,) = inputs, outputs
    kernel = fn.kernel(_CUDA_KERNELS[x.dtype])
    block, vec = int(fn.knobs.get("BLOCK", 256)), int(fn.knobs.get("VEC", 8))
    tokens, d = shape["tokens"], shape["d"]
    per_block = block * int(fn.knobs.get("ITEMS", 1)) if d % vec == 0 else block
    steps = d // vec if d % vec == 0 else d
    kernel((-(-steps // per_block), min(tokens, 65535)), block, out, x, d, tokens)


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
