# Honest control: a legitimate alternative to the starting kernel. One program covers a block
# of columns of every row at once (a [ROWS, BLOCK] tile), so a launch runs far fewer programs.
import triton
import triton.language as tl


@triton.jit
def silu_kernel(out_ptr, x_ptr, d, BLOCK: tl.constexpr):
    row = tl.program_id(1).to(tl.int64)
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < d
    gate = tl.load(x_ptr + row * 2 * d + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * 2 * d + d + cols, mask=mask, other=0.0).to(tl.float32)
    y = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out_ptr + row * d + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def rows_kernel(out_ptr, x_ptr, tokens, d, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.arange(0, ROWS)[:, None].to(tl.int64)
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)[None, :]
    mask = (rows < tokens) & (cols < d)
    gate = tl.load(x_ptr + rows * 2 * d + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + rows * 2 * d + d + cols, mask=mask, other=0.0).to(tl.float32)
    y = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out_ptr + rows * d + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(out, x, tokens, d, BLOCK=1024):
    rows = triton.next_power_of_2(tokens)
    if rows * BLOCK > 1 << 16:  # keep a tile's size bounded; otherwise row by row
        silu_kernel[(triton.cdiv(d, BLOCK), tokens)](out, x, d, BLOCK=BLOCK)
        return
    rows_kernel[(triton.cdiv(d, BLOCK),)](out, x, tokens, d, ROWS=rows, BLOCK=BLOCK)
