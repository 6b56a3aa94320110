"""silu_and_mul in Triton: out[t, i] = silu(x[t, i]) * x[t, d + i], for any float dtype.

A plain first version: one program per (block of columns, row); math in float32, stored in the
output's dtype. BLOCK is a knob: the evaluator passes its value to the entry point.
"""

import triton
import triton.language as tl


@triton.jit
def _silu_and_mul_kernel(out_ptr, x_ptr, d, BLOCK: tl.constexpr):
    row = tl.program_id(1).to(tl.int64)
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < d
    gate = tl.load(x_ptr + row * 2 * d + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * 2 * d + d + cols, mask=mask, other=0.0).to(tl.float32)
    y = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out_ptr + row * d + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(out, x, tokens, d, BLOCK=1024):
    grid = (triton.cdiv(d, BLOCK), tokens)
    _silu_and_mul_kernel[grid](out, x, d, BLOCK=BLOCK)
