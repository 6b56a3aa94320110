"""softmax in Triton: out[r, :] = exp(x[r, :] - max(x[r, :])) / sum(exp(x[r, :] - max(x[r, :]))),
for any float dtype.

A plain first version: each program takes ROWS rows and walks them in BLOCK-wide chunks three
times (the maximum, the sum of exponentials, the scaled writes); math in float32, stored in the
output's dtype. Several rows a program because short rows leave a one-row program mostly idle on
the GPU, and because Triton's CPU interpreter pays for every program and operation rather than
for every element. BLOCK and ROWS are knobs: the evaluator passes them to the entry point as
keyword arguments.
"""

import triton
import triton.language as tl


@triton.jit
def _softmax_kernel(out_ptr, x_ptr, rows_total, cols, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < rows_total
    starts = rows[:, None] * cols
    offsets = tl.arange(0, BLOCK)
    row_max = tl.full([ROWS, BLOCK], float("-inf"), dtype=tl.float32)
    for chunk in range(0, cols, BLOCK):
        at = chunk + offsets[None, :]
        x = tl.load(x_ptr + starts + at, mask=row_ok[:, None] & (at < cols), other=float("-inf"))
        row_max = tl.maximum(row_max, x.to(tl.float32))
    # Rows past the end get a finite maximum, so that their (never stored) lanes stay free of
    # -inf - -inf = NaN.
    row_max = tl.where(row_ok, tl.max(row_max, axis=1), 0.0)[:, None]
    total = tl.zeros([ROWS, BLOCK], dtype=tl.float32)
    for chunk in range(0, cols, BLOCK):
        at = chunk + offsets[None, :]
        x = tl.load(x_ptr + starts + at, mask=row_ok[:, None] & (at < cols), other=float("-inf"))
        total += tl.exp(x.to(tl.float32) - row_max)  # exp(-inf) = 0 past the row's end
    inv_sum = 1.0 / tl.where(row_ok, tl.sum(total, axis=1), 1.0)[:, None]
    for chunk in range(0, cols, BLOCK):
        at = chunk + offsets[None, :]
        mask = row_ok[:, None] & (at < cols)
        x = tl.load(x_ptr + starts + at, mask=mask, other=float("-inf"))
        y = tl.exp(x.to(tl.float32) - row_max) * inv_sum
        tl.store(out_ptr + starts + at, y.to(out_ptr.dtype.element_ty), mask=mask)


def softmax(out, x, rows, cols, BLOCK=4096, ROWS=4):
    # About 32 elements of a tile per thread: more warps for bigger tiles, 4 to 16.
    num_warps = max(4, min(16, ROWS * BLOCK // 1024))
    _softmax_kernel[(triton.cdiv(rows, ROWS),)](out, x, rows, cols, ROWS=ROWS, BLOCK=BLOCK,
                                                 num_warps=num_warps)
