"""fused_add_rmsnorm in Triton: per row, residual_out = x + residual and
x_out = (x + residual) / sqrt(mean((x + residual)^2) + eps) * weight, for any float dtype.

A plain first version: each program takes ROWS rows and walks them in BLOCK-wide chunks twice
(the sums of squares, then the writes); math in float32, stored in the outputs' dtype. Several
rows a program because short rows leave a one-row program mostly idle on the GPU, and because
Triton's CPU interpreter pays for every program and operation rather than for every element.
BLOCK and ROWS are knobs: the evaluator passes them to the entry point as keyword arguments.
"""

import triton
import triton.language as tl


@triton.jit
def _fused_add_rmsnorm_kernel(x_out_ptr, residual_out_ptr, x_ptr, residual_ptr, weight_ptr,
                              tokens, hidden, eps, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    starts = rows[:, None] * hidden
    row_ok = rows[:, None] < tokens
    offsets = tl.arange(0, BLOCK)
    sum_sq = tl.zeros([ROWS, BLOCK], dtype=tl.float32)
    for chunk in range(0, hidden, BLOCK):
        cols = chunk + offsets[None, :]
        mask = row_ok & (cols < hidden)
        s = (tl.load(x_ptr + starts + cols, mask=mask, other=0.0).to(tl.float32)
             + tl.load(residual_ptr + starts + cols, mask=mask, other=0.0).to(tl.float32))
        sum_sq += s * s
    inv_rms = tl.rsqrt(tl.sum(sum_sq, axis=1) / hidden + eps)[:, None]
    # The second pass adds the inputs again rather than reading residual_out back, so x_out
    # scales the unrounded float sum, as the reference does.
    for chunk in range(0, hidden, BLOCK):
        cols = chunk + offsets[None, :]
        mask = row_ok & (cols < hidden)
        s = (tl.load(x_ptr + starts + cols, mask=mask, other=0.0).to(tl.float32)
             + tl.load(residual_ptr + starts + cols, mask=mask, other=0.0).to(tl.float32))
        weight = tl.load(weight_ptr + cols, mask=cols < hidden, other=0.0).to(tl.float32)
        tl.store(residual_out_ptr + starts + cols, s.to(residual_out_ptr.dtype.element_ty),
                 mask=mask)
        tl.store(x_out_ptr + starts + cols, (s * inv_rms * weight).to(x_out_ptr.dtype.element_ty),
                 mask=mask)


def fused_add_rmsnorm(x_out, residual_out, x, residual, weight, tokens, hidden, eps, BLOCK=4096,
                      ROWS=4):
    # About 32 elements of a tile per thread: more warps for bigger tiles, 4 to 16.
    num_warps = max(4, min(16, ROWS * BLOCK // 1024))
    _fused_add_rmsnorm_kernel[(triton.cdiv(tokens, ROWS),)](
        x_out, residual_out, x, residual, weight, tokens, hidden, eps, ROWS=ROWS, BLOCK=BLOCK,
        num_warps=num_warps)
