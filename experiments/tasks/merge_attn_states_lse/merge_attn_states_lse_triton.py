"""merge_attn_states_lse in Triton: per (token, head) pair, the two partial outputs weighted by
their log-sum-exps, and the merged log-sum-exp (see task.py), for any float dtype.

A plain first version: each program takes ROWS (token, head) pairs, computes their weights from
the two lses in float32 (a part with lse = -inf weighs 0; where both do, the output is 0 and the
lse -inf), then walks head_dim in BLOCK-wide chunks, storing in the outputs' dtype. Several pairs
a program because one pair is a short row (head_dim elements). BLOCK and ROWS are knobs: the
evaluator passes them to the entry point as keyword arguments.
"""

import triton
import triton.language as tl


@triton.jit
def _merge_attn_states_lse_kernel(out_ptr, out_lse_ptr, o_a_ptr, lse_a_ptr, o_b_ptr, lse_b_ptr,
                                  pairs, head_dim, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < pairs
    lse_a = tl.load(lse_a_ptr + rows, mask=row_ok, other=float("-inf"))
    lse_b = tl.load(lse_b_ptr + rows, mask=row_ok, other=float("-inf"))
    m = tl.maximum(lse_a, lse_b)
    m = tl.where(m == float("-inf"), 0.0, m)  # both parts empty: both weights exp(-inf) = 0
    w_a = tl.exp(lse_a - m)
    w_b = tl.exp(lse_b - m)
    total = w_a + w_b
    safe = tl.where(total > 0, total, 1.0)
    scale_a = (w_a / safe)[:, None]
    scale_b = (w_b / safe)[:, None]
    tl.store(out_lse_ptr + rows, tl.log(total) + m, mask=row_ok)
    starts = rows[:, None] * head_dim
    offsets = tl.arange(0, BLOCK)
    for chunk in range(0, head_dim, BLOCK):
        cols = chunk + offsets[None, :]
        mask = row_ok[:, None] & (cols < head_dim)
        a = tl.load(o_a_ptr + starts + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(o_b_ptr + starts + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + starts + cols, (a * scale_a + b * scale_b).to(out_ptr.dtype.element_ty),
                 mask=mask)


def merge_attn_states_lse(out, out_lse, o_a, lse_a, o_b, lse_b, tokens, heads, head_dim,
                          BLOCK=128, ROWS=8):
    pairs = tokens * heads
    # About 8 elements of a tile per thread: more warps for bigger tiles, 1 to 8.
    num_warps = max(1, min(8, ROWS * BLOCK // 256))
    _merge_attn_states_lse_kernel[(triton.cdiv(pairs, ROWS),)](
        out, out_lse, o_a, lse_a, o_b, lse_b, pairs, head_dim, ROWS=ROWS, BLOCK=BLOCK,
        num_warps=num_warps)
