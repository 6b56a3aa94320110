"""gemm: C = A @ B for row-major A[m, k], B[k, n], C[m, n].

The matrix multiply of a CuTeGen-style workload suite at the sizes of LLaMA's MLP projections:
``m`` is the token count, ``(n, k)`` the up-projection (hidden -> intermediate) or the
down-projection (intermediate -> hidden) of LLaMA-7B, 13B and 70B. On the GPU the operands and
the result are bfloat16 with float32 accumulation; on the CPU everything is float32.

``B`` is scaled by 1/sqrt(k) so that entries of C stay near 1 whatever ``k`` is, and the
tolerances mean the same at every size.
"""

import math

import torch

NAME = "gemm"
DESCRIPTION = __doc__

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

# (n, k) of LLaMA MLP projections: up (hidden -> intermediate) and down (intermediate -> hidden).
_PROJECTIONS = [(11008, 4096), (4096, 11008),  # 7B
                (13824, 5120), (5120, 13824),  # 13B
                (28672, 8192), (8192, 28672)]  # 70B

# cpu: float32 sizes a scalar kernel on a 2-core machine evaluates in seconds. cuda: decode and
# prefill token counts times every projection, bf16, and the square 4096^3 and 8192^3 that matmul
# benchmarks quote.
TUNING_SHAPES = {
    "cpu": [{"m": 1, "n": 1024, "k": 1024, "dtype": "float32"},
            {"m": 16, "n": 512, "k": 512, "dtype": "float32"},
            {"m": 64, "n": 256, "k": 512, "dtype": "float32"}],
    "cuda": [{"m": m, "n": n, "k": k, "dtype": "bfloat16"}
             for n, k in _PROJECTIONS for m in (1, 16, 128, 1024, 8192)]
            + [{"m": s, "n": s, "k": s, "dtype": "bfloat16"} for s in (4096, 8192)],
}
# Odd sizes in every dimension: tails of tiles, and k that is not a multiple of a vector width.
HELDOUT_SHAPES = {
    "cpu": [{"m": 7, "n": 333, "k": 129, "dtype": "float32"},
            {"m": 3, "n": 1000, "k": 257, "dtype": "float32"},
            {"m": 67, "n": 1029, "k": 1031, "dtype": "float32"}],
    "cuda": [{"m": 7, "n": 11008, "k": 4096, "dtype": "bfloat16"},
             {"m": 333, "n": 5120, "k": 13824, "dtype": "bfloat16"},
             {"m": 17, "n": 4099, "k": 1001, "dtype": "bfloat16"},
             {"m": 8197, "n": 1001, "k": 1003, "dtype": "bfloat16"},
             {"m": 5, "n": 16391, "k": 16389, "dtype": "bfloat16"}],
}

# float32: another summation order over k terms of size ~1/sqrt(k); bfloat16: a rounding step of
# the output plus the reference's own reduced-precision reductions (cuBLAS may split k).
TOLERANCES = {
    "float32": {"atol": 1e-4, "rtol": 1e-4},
    "float16": {"atol": 1e-3, "rtol": 2e-3},
    "bfloat16": {"atol": 1e-2, "rtol": 2e-2},
}

KERNELS = {
    "cpp": {
        "source": "gemm.cpp",
        "entry": "gemm",
        "argtypes": ["ptr", "ptr", "ptr", "i64", "i64", "i64"],  # c, a, b, m, n, k
        "knobs": {},
    },
    "cuda": {
        "source": "gemm.cu",
        "entry": "gemm_bf16",
        "knobs": {"TILE": [16, 8, 32]},
    },
    "cute": {
        "source": "gemm_cute.cu",
        "entry": "gemm_bf16",
        "knobs": {"BM": [128, 64], "BN": [128, 64], "STAGES": [3, 2, 4, 5]},
    },
}
_CUDA_KERNELS = {torch.bfloat16: "gemm_bf16"}


def make_inputs(shape, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = _DTYPES[shape["dtype"]]
    a = torch.randn(shape["m"], shape["k"], generator=g, device=device)
    b = torch.randn(shape["k"], shape["n"], generator=g, device=device) / math.sqrt(shape["k"])
    return a.to(dtype), b.to(dtype)


def make_outputs(shape, device):
    return (torch.empty(shape["m"], shape["n"], dtype=_DTYPES[shape["dtype"]], device=device),)


def reference(a, b):
    return (a @ b,)


def launch_cpp(fn, inputs, outputs, shape):
    (a, b), (c,) = inputs, outputs
    fn(c.data_ptr(), a.data_ptr(), b.data_ptr(), shape["m"], shape["n"], shape["k"])


def launch_cuda(fn, inputs, outputs, shape):
    # One TILE x TILE block per TILE x TILE tile of C: x walks the columns (n), y the rows (m).
    (a, b), (c,) = inputs, outputs
    kernel = fn.kernel(_CUDA_KERNELS[a.dtype])
    tile = int(fn.knobs.get("TILE", 16))
    grid = ((shape["n"] + tile - 1) // tile, (shape["m"] + tile - 1) // tile)
    kernel(grid, (tile, tile), c, a, b, shape["m"], shape["n"], shape["k"])


def launch_cute(fn, inputs, outputs, shape):
    # gemm_bf16 where n and k are multiples of 8 (whole 16-byte vectors in every row): one CTA
    # of 128 threads per BM x BN tile of C, x along n, STAGES (BM + BN) x 64 bf16 tiles of shared
    # memory. Otherwise gemm_bf16_any: one 256-thread block per 16 x 16 tile.
    (a, b), (c,) = inputs, outputs
    m, n, k = shape["m"], shape["n"], shape["k"]
    if n % 8 or k % 8:
        fn.kernel("gemm_bf16_any")((-(-n // 16), -(-m // 16)), 256, c, a, b, m, n, k)
        return
    bm, bn = int(fn.knobs.get("BM", 128)), int(fn.knobs.get("BN", 128))
    stages = int(fn.knobs.get("STAGES", 3))
    kernel = fn.kernel("gemm_bf16")
    kernel((-(-n // bn), -(-m // bm)), 128, c, a, b, m, n, k,
           shared_mem=stages * (bm + bn) * 64 * a.element_size())


def launch_matmul(fn, inputs, outputs, shape):
    # not a kernel language's launcher: torch.matmul (cuBLAS on a GPU) written into the output,
    # what benchmarks/cute_gemm.py times its kernels against (fn is unused)
    (a, b), (c,) = inputs, outputs
    torch.matmul(a, b, out=c)


def roofline(shape):
    size = _DTYPES[shape["dtype"]].itemsize
    m, n, k = shape["m"], shape["n"], shape["k"]
    moved = (m * k + k * n + m * n) * size  # each operand read once, C written once
    flops = 2 * m * n * k  # a multiply and an add per (i, j, l)
    return moved, flops
