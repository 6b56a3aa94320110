"""merge_attn_states_lse: merge two partial attention results by their log-sum-exps.

Attention over keys split in two parts (a cached prefix and new suffix tokens in chunked prefill,
or two KV splits in split-KV decoding) gives two partial outputs ``o_a``, ``o_b`` of shape
``[tokens, heads, head_dim]``, each normalised over its own keys, with log-sum-exps ``lse_a``,
``lse_b`` of shape ``[tokens, heads]`` (float32). Attention over all keys is their weighted mean:

    m      = max(lse_a, lse_b)
    w_a    = exp(lse_a - m),  w_b = exp(lse_b - m)          (subtracting m keeps exp <= 1)
    out    = (w_a * o_a + w_b * o_b) / (w_a + w_b)
    lse    = m + log(w_a + w_b)

A part with ``lse = -inf`` attended to no keys and contributes nothing (its weight is 0, whatever
its output holds). Where both are -inf the merged output is 0 and the merged lse is -inf. Weights
and sums are float32 whatever the outputs' dtype; the merged lse is float32.
"""

import math

import torch

NAME = "merge_attn_states_lse"
DESCRIPTION = __doc__

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
_EMPTY = 0.1  # fraction of (token, head) pairs whose part attended to no keys, per part


def _grid(tokens, heads, head_dims, dtypes):
    return [{"tokens": t, "heads": h, "head_dim": d, "dtype": dt}
            for dt in dtypes for d in head_dims for h in heads for t in tokens]


# cpu: float32 sizes a 2-core machine evaluates in seconds. cuda: decode and prefill token counts
# at the query-head counts of LLaMA-7B (32), 13B (40) and 70B (64), head_dim 128.
TUNING_SHAPES = {
    "cpu": _grid([1, 16, 64], [32], [128], ["float32"]) + _grid([8], [40], [128], ["float32"]),
    "cuda": _grid([1, 16, 128, 1024, 8192], [32, 40, 64], [128], ["bfloat16"])
    + _grid([16, 1024], [32, 64], [128], ["float16"]),
}
# Odd token and head counts, and head sizes that are not powers of two (80, 96 exist in models).
HELDOUT_SHAPES = {
    "cpu": [{"tokens": 3, "heads": 5, "head_dim": 80, "dtype": "float32"},
            {"tokens": 7, "heads": 40, "head_dim": 96, "dtype": "float32"},
            {"tokens": 67, "heads": 5, "head_dim": 136, "dtype": "float32"}],
    "cuda": [{"tokens": 7, "heads": 40, "head_dim": 128, "dtype": "bfloat16"},
             {"tokens": 333, "heads": 32, "head_dim": 96, "dtype": "float16"},
             {"tokens": 1001, "heads": 5, "head_dim": 80, "dtype": "bfloat16"},
             {"tokens": 8195, "heads": 67, "head_dim": 136, "dtype": "bfloat16"}],
}

# The merged lse is always float32: its tolerance applies in every shape.
TOLERANCES = {
    "float32": {"atol": 1e-5, "rtol": 1e-5},
    "float16": {"atol": 1e-3, "rtol": 1e-3},
    "bfloat16": {"atol": 1e-2, "rtol": 1e-2},
}

KERNELS = {
    "cpp": {
        "source": "merge_attn_states_lse.cpp",
        "entry": "merge_attn_states_lse",
        # out, out_lse, o_a, lse_a, o_b, lse_b, tokens, heads, head_dim
        "argtypes": ["ptr", "ptr", "ptr", "ptr", "ptr", "ptr", "i64", "i64", "i64"],
        "knobs": {},
    },
    "cuda": {
        "source": "merge_attn_states_lse.cu",
        "entry": "merge_attn_states_lse_bf16",
        "knobs": {"BLOCK": [128, 32, 64, 256]},
    },
    "triton": {
        "source": "merge_attn_states_lse_triton.py",
        "entry": "merge_attn_states_lse",
        "knobs": {"BLOCK": [128, 64, 256], "ROWS": [8, 1, 2, 4, 16]},
    },
}
_CUDA_KERNELS = {torch.bfloat16: "merge_attn_states_lse_bf16",
                 torch.float16: "merge_attn_states_lse_f16"}

# Library kernels users run in production, timed as baselines where installed and skipped (with
# the reason) where not; each is checked against `reference` before it counts. `call` names the
# adapter below: (the imported module, *inputs) -> outputs as `reference` returns them.
ANCHORS = {
    "flashinfer": {"package": "flashinfer-python", "module": "flashinfer",
                   "call": "anchor_merge_state", "devices": ["cuda"]},
    "sgl-kernel": {"package": "sgl-kernel", "module": "sgl_kernel",
                   "call": "anchor_merge_state", "devices": ["cuda"]},
}


def _part(shape, g, device):
    size = (shape["tokens"], shape["heads"])
    out = torch.randn(*size, shape["head_dim"], generator=g, device=device)
    lse = 2.0 * torch.randn(size, generator=g, device=device) + 5.0
    empty = torch.rand(size, generator=g, device=device) < _EMPTY
    return out.to(_DTYPES[shape["dtype"]]), lse.masked_fill(empty, -math.inf)


def make_inputs(shape, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    o_a, lse_a = _part(shape, g, device)
    o_b, lse_b = _part(shape, g, device)
    # Every problem has both edge cases, whatever the random draw: one empty part, and a pair
    # where both parts are empty.
    lse_a[0, 0] = -math.inf
    lse_a[-1, -1] = lse_b[-1, -1] = -math.inf
    return o_a, lse_a, o_b, lse_b


def make_outputs(shape, device):
    size = (shape["tokens"], shape["heads"])
    return (torch.empty(*size, shape["head_dim"], dtype=_DTYPES[shape["dtype"]], device=device),
            torch.empty(size, dtype=torch.float32, device=device))


def reference(o_a, lse_a, o_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)  # both empty: weights exp(-inf)=0
    w_a, w_b = torch.exp(lse_a - m), torch.exp(lse_b - m)
    total = w_a + w_b
    safe = torch.where(total > 0, total, torch.ones_like(total))
    scale_a, scale_b = (w_a / safe).unsqueeze(-1), (w_b / safe).unsqueeze(-1)
    out = o_a.float() * scale_a + o_b.float() * scale_b
    return out.to(o_a.dtype), torch.log(total) + m


def anchor_merge_state(lib, o_a, lse_a, o_b, lse_b):
    # merge_state(v_a, s_a, v_b, s_b) -> (v, s) takes and returns base-2 log-sum-exps
    out, lse2 = lib.merge_state(o_a, lse_a * math.log2(math.e), o_b, lse_b * math.log2(math.e))
    return out, lse2 * math.log(2.0)


def launch_cpp(fn, inputs, outputs, shape):
    (o_a, lse_a, o_b, lse_b), (out, out_lse) = inputs, outputs
    fn(out.data_ptr(), out_lse.data_ptr(), o_a.data_ptr(), lse_a.data_ptr(), o_b.data_ptr(),
       lse_b.data_ptr(), shape["tokens"], shape["heads"], shape["head_dim"])


def launch_cuda(fn, inputs, outputs, shape):
    # One block per (token, head) pair, of BLOCK threads; the kernel takes the pair count last.
    # Geometry knobs (docs/tasks.md): with ROWS, a block holds ROWS pairs along threadIdx.y, each
    # with BLOCK threads at most, or as few as cover head_dim in VEC-wide steps.
    (o_a, lse_a, o_b, lse_b), (out, out_lse) = inputs, outputs
    kernel = fn.kernel(_CUDA_KERNELS[o_a.dtype])
    pairs, head_dim = shape["tokens"] * shape["heads"], shape["head_dim"]
    block = int(fn.knobs.get("BLOCK", 128))
    grid, threads = pairs, block
    if "ROWS" in fn.knobs:
        width = min(block, -(-head_dim // int(fn.knobs.get("VEC", 1))))
        rows = max(1, min(int(fn.knobs["ROWS"]), 1024 // width))
        grid, threads = -(-pairs // rows), (width, rows)
    kernel(grid, threads, out, out_lse, o_a, lse_a, o_b, lse_b, head_dim, pairs)


def launch_triton(fn, inputs, outputs, shape):
    # fn: the module's entry point, a Python function that launches its @triton.jit kernels
    (o_a, lse_a, o_b, lse_b), (out, out_lse) = inputs, outputs
    fn(out, out_lse, o_a, lse_a, o_b, lse_b, shape["tokens"], shape["heads"], shape["head_dim"])


def roofline(shape):
    size = _DTYPES[shape["dtype"]].itemsize
    pairs = shape["tokens"] * shape["heads"]
    elements = pairs * shape["head_dim"]
    moved = 3 * elements * size + 3 * pairs * 4  # two parts and the result; lses are float32
    # per element: two multiplies and an add; per (token, head): max, two subtracts, two exps,
    # add, two divides, log, add
    flops = 3 * elements + 10 * pairs
    return moved, flops
