"""Output code in the form torch.compile (Inductor) writes for CUDA, for tests without a GPU.

Written for these tests in Inductor's layout (an ``async_compile.triton`` kernel with its
heuristics decorator and runtime imports, a ``call`` that allocates, launches and returns), at
the sizes a test asks for: what ``run_and_get_code`` captures on a GPU, to convert on a CPU.
"""

from __future__ import annotations

_HEADER = """\
from ctypes import c_void_p, c_long, c_int
import torch
from torch._inductor.select_algorithm import extern_kernels
from torch._inductor.async_compile import AsyncCompile
from torch._C import _cuda_getCurrentRawStream as get_raw_stream
assert_size_stride = torch._C._dynamo.guards.assert_size_stride
empty_strided_cuda = torch._C._dynamo.guards._empty_strided_cuda
reinterpret_tensor = torch._C._dynamo.guards._reinterpret_tensor
async_compile = AsyncCompile()
"""

_RUNTIME = """
import triton
import triton.language as tl

from torch._inductor.runtime import triton_helpers, triton_heuristics
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
from torch._inductor.runtime.hints import AutotuneHint, ReductionHint, TileHint, DeviceProperties
triton_helpers.set_driver_to_gpu()
"""


def silu_and_mul(tokens: int, d: int) -> str:
    """silu(x[:, :d]) * x[:, d:] as one pointwise kernel over tokens * d elements."""
    numel = tokens * d
    kernel = f"""{_RUNTIME}
@triton_heuristics.pointwise(
    size_hints={{'x': {numel}}}, filename=__file__,
    triton_meta={{'signature': {{'in_ptr0': '*fp32', 'out_ptr0': '*fp32', 'xnumel': 'i32',
                  'XBLOCK': 'constexpr'}}, 'device': DeviceProperties(type='cuda', index=0)}},
    inductor_meta={{'grid_type': 'Grid1D', 'kernel_name': 'triton_poi_fused_mul_silu_0'}},
    min_elem_per_thread=0
)
@triton.jit
def triton_poi_fused_mul_silu_0(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    xnumel = {numel}
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x0 = (xindex % {d})
    x1 = xindex // {d}
    x2 = xindex
    tmp0 = tl.load(in_ptr0 + (x0 + {2 * d}*x1), xmask)
    tmp5 = tl.load(in_ptr0 + ({d} + x0 + {2 * d}*x1), xmask)
    tmp1 = tl.sigmoid(tmp0)
    tmp2 = tmp0 * tmp1
    tmp6 = tmp2 * tmp5
    tl.store(out_ptr0 + (x2), tmp6, xmask)
"""
    return f"""{_HEADER}
triton_poi_fused_mul_silu_0 = async_compile.triton('triton_poi_fused_mul_silu_0', '''
{kernel}''', device_str='cuda')

async_compile.wait(globals())
del async_compile

def call(args):
    arg0_1, = args
    args.clear()
    assert_size_stride(arg0_1, ({tokens}, {2 * d}), ({2 * d}, 1))
    with torch.cuda._DeviceGuard(0):
        torch.cuda.set_device(0)
        buf0 = empty_strided_cuda(({tokens}, {d}), ({d}, 1), torch.float32)
        # Topologically Sorted Source Nodes: [silu, mul]
        stream0 = get_raw_stream(0)
        triton_poi_fused_mul_silu_0.run(arg0_1, buf0, {numel}, stream=stream0)
        del arg0_1
    return (buf0, )
"""


def softmax_transposed(rows: int, cols: int) -> str:
    """softmax over the last dimension of a [rows, cols] input, returned as its transpose
    (a view: the converted kernel must copy it into a contiguous output), by one persistent
    reduction kernel."""
    block = 1 << max(0, (cols - 1).bit_length())
    kernel = f"""{_RUNTIME}
@triton_heuristics.persistent_reduction(
    size_hints={{'x': {rows}, 'r0_': {block}}}, reduction_hint=ReductionHint.INNER,
    filename=__file__,
    triton_meta={{'signature': {{'in_ptr0': '*fp32', 'out_ptr2': '*fp32', 'xnumel': 'i32',
                  'r0_numel': 'i32', 'XBLOCK': 'constexpr'}}}},
    inductor_meta={{'kernel_name': 'triton_per_fused__softmax_0'}}
)
@triton.jit
def triton_per_fused__softmax_0(in_ptr0, out_ptr2, xnumel, r0_numel, XBLOCK : tl.constexpr):
    xnumel = {rows}
    r0_numel = {cols}
    R0_BLOCK: tl.constexpr = {block}
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    r0_mask = r0_index < r0_numel
    r0_1 = r0_index
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (r0_1 + {cols}*x0), r0_mask & xmask, other=0.0)
    tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])
    tmp3 = tl.where(r0_mask & xmask, tmp1, float("-inf"))
    tmp4 = triton_helpers.max2(tmp3, 1)[:, None]
    tmp5 = tmp0 - tmp4
    tmp6 = tl_math.exp(tmp5)
    tmp7 = tl.broadcast_to(tmp6, [XBLOCK, R0_BLOCK])
    tmp9 = tl.where(r0_mask & xmask, tmp7, 0)
    tmp10 = tl.sum(tmp9, 1)[:, None]
    tmp11 = tmp6 / tmp10
    tl.store(out_ptr2 + (r0_1 + {cols}*x0), tmp11, r0_mask & xmask)
"""
    return _rows_module("triton_per_fused__softmax_0", kernel, rows, cols,
                        f"reinterpret_tensor(buf2, ({cols}, {rows}), (1, {cols}), 0)")


def _module(name: str, kernel: str, call: str) -> str:
    """Output code compiling one Triton kernel and a ``Runner.call`` of body ``call`` (its
    lines indented for the method)."""
    return f"""{_HEADER}
{name} = async_compile.triton('{name}', '''
{kernel}''', device_str='cuda')

async_compile.wait(globals())
del async_compile

class Runner:
    def call(self, args):
{call}"""


def _rows_module(name: str, kernel: str, rows: int, cols: int, returned: str) -> str:
    """Output code launching one kernel over a [rows, cols] float32 input into a buffer of the
    same size, and returning ``returned`` (``buf2``, or a view of it)."""
    return _module(name, kernel, f"""        arg0_1, = args
        args.clear()
        assert_size_stride(arg0_1, ({rows}, {cols}), ({cols}, 1))
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)
            buf2 = empty_strided_cuda(({rows}, {cols}), ({cols}, 1), torch.float32)
            stream0 = get_raw_stream(0)
            {name}.run(arg0_1, buf2, {rows}, {cols}, stream=stream0)
            del arg0_1
        return ({returned}, )
""")


def matmul(n: int) -> str:
    """A graph whose only op is a matmul, which Inductor hands to cuBLAS."""
    return f"""{_HEADER}
async_compile.wait(globals())
del async_compile

def call(args):
    arg0_1, arg1_1 = args
    args.clear()
    assert_size_stride(arg0_1, ({n}, {n}), ({n}, 1))
    assert_size_stride(arg1_1, ({n}, {n}), ({n}, 1))
    with torch.cuda._DeviceGuard(0):
        torch.cuda.set_device(0)
        buf0 = empty_strided_cuda(({n}, {n}), ({n}, 1), torch.float32)
        extern_kernels.mm(arg0_1, arg1_1, out=buf0)
        del arg0_1
        del arg1_1
    return (buf0, )
"""


def _looped(name: str, rows: int, cols: int, body: str, prelude: str = "") -> str:
    """A looped reduction kernel (``triton_red_*``) over rows of ``cols`` and its ``call``
    (``prelude``: functions the kernel's module defines before it)."""
    kernel = f"""{_RUNTIME}{prelude}
@triton_heuristics.reduction(
    size_hints={{'x': {rows}, 'r0_': {cols}}}, reduction_hint=ReductionHint.INNER,
    filename=__file__,
    triton_meta={{'signature': {{'in_ptr0': '*fp32', 'out_ptr2': '*fp32', 'xnumel': 'i32',
                  'r0_numel': 'i32', 'XBLOCK': 'constexpr', 'R0_BLOCK': 'constexpr'}}}},
    inductor_meta={{'kernel_name': '{name}'}}
)
@triton.jit
def {name}(in_ptr0, out_ptr2, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xnumel = {rows}
    r0_numel = {cols}
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    rbase = r0_base
    x0 = xindex
{body}"""
    return _rows_module(name, kernel, rows, cols, "buf2")


def online_softmax(rows: int, cols: int) -> str:
    """softmax over the last dimension of a [rows, cols] input by one looped reduction, with
    Inductor's online softmax helpers (a running max and sum, then one pass that writes)."""
    body = f"""    _tmp3_max = tl.full([XBLOCK, R0_BLOCK], float('-inf'), tl.float32)
    _tmp3_sum = tl.zeros([XBLOCK, R0_BLOCK], tl.float32)
    for r0_offset in range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + {cols}*x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])
        _tmp3_max_next, _tmp3_sum_next = triton_helpers.online_softmax_combine(
            _tmp3_max, _tmp3_sum, tmp1, False
        )
        _tmp3_max = tl.where(r0_mask & xmask, _tmp3_max_next, _tmp3_max)
        _tmp3_sum = tl.where(r0_mask & xmask, _tmp3_sum_next, _tmp3_sum)
    tmp3, tmp4 = triton_helpers.online_softmax_reduce(
        _tmp3_max, _tmp3_sum, 1, False)
    tmp3 = tmp3[:, None]
    tmp4 = tmp4[:, None]
    for r0_offset in range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        r0_1 = r0_index
        tmp5 = tl.load(in_ptr0 + (r0_1 + {cols}*x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0)
        tmp6 = tmp5 - tmp3
        tmp7 = tl_math.exp(tmp6)
        tmp8 = (tmp7 / tmp4)
        tl.store(out_ptr2 + (r0_1 + {cols}*x0), tmp8, r0_mask & xmask)
"""
    return _looped("triton_red_fused__softmax_0", rows, cols, body)


def welford_layer_norm(rows: int, cols: int) -> str:
    """layer_norm (no weight) over the last dimension by one looped reduction, with Inductor's
    Welford helpers (a running mean and sum of squared deviations, then one pass that writes)."""
    body = f"""    tmp2_mean = tl.zeros([XBLOCK, R0_BLOCK], tl.float32)
    tmp2_m2 = tl.zeros([XBLOCK, R0_BLOCK], tl.float32)
    tmp2_weight = tl.zeros([XBLOCK, R0_BLOCK], tl.float32)
    for r0_offset in range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + {cols}*x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])
        tmp2_mean_next, tmp2_m2_next, tmp2_weight_next = triton_helpers.welford_reduce(
            tmp1, tmp2_mean, tmp2_m2, tmp2_weight, r0_offset == 0
        )
        tmp2_mean = tl.where(r0_mask & xmask, tmp2_mean_next, tmp2_mean)
        tmp2_m2 = tl.where(r0_mask & xmask, tmp2_m2_next, tmp2_m2)
        tmp2_weight = tl.where(r0_mask & xmask, tmp2_weight_next, tmp2_weight)
    tmp5, tmp6, tmp7 = triton_helpers.welford(tmp2_mean, tmp2_m2, tmp2_weight, 1)
    tmp2 = tmp5[:, None]
    tmp3 = tmp6[:, None]
    for r0_offset in range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        r0_1 = r0_index
        tmp8 = tl.load(in_ptr0 + (r0_1 + {cols}*x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0)
        tmp9 = tmp8 - tmp2
        tmp10 = {float(cols)}
        tmp11 = (tmp3 / tmp10)
        tmp12 = 1e-05
        tmp13 = tmp11 + tmp12
        tmp14 = libdevice.rsqrt(tmp13)
        tmp15 = tmp9 * tmp14
        tl.store(out_ptr2 + (r0_1 + {cols}*x0), tmp15, r0_mask & xmask)
"""
    return _looped("triton_red_fused_native_layer_norm_0", rows, cols, body)


_ADD_COMBINE = """
@triton.jit
def _triton_helper_fn_add0(arg0_0, arg1_0):
    tmp0 = arg0_0 + arg1_0
    return tmp0
"""


def looped_cumsum(rows: int, cols: int) -> str:
    """cumsum over the last dimension by a looped reduction kernel: a scan of each chunk with
    the combine function defined beside the kernel, the chunk's total carried to the next one
    (Inductor's ``select_one`` picks it)."""
    body = f"""    tmp3 = tl.full([XBLOCK, 1], float('nan'), tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + {cols}*x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0)
        tmp2 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])
        tmp4, = tl.associative_scan((tmp2,), 1, _triton_helper_fn_add0)
        tmp5 = triton_helpers.select_one((tmp4), rbase == (RBLOCK - 1), dim=-1, keep_dims=True)
        tmp6 = tmp3 + tmp5
        tmp7 = tmp3 + tmp4
        tmp8 = tl.where(roffset > 0, tmp7, tmp4)
        tmp3 = tl.where(roffset > 0, tmp6, tmp5)
        tl.store(out_ptr2 + (r0_1 + {cols}*x0), tmp8, r0_mask & xmask)
"""
    return _looped("triton_red_fused_cumsum_0", rows, cols, body, _ADD_COMBINE)


def split_scan_cumsum(cols: int) -> str:
    """cumsum of one long row as Inductor writes it for a single row: a split scan whose blocks
    pass their totals on through a workspace it zeroes before the launch."""
    name = "triton_spl_fused_cumsum_0"
    kernel = f"""{_RUNTIME}{_ADD_COMBINE}
@triton_heuristics.split_scan(
    size_hints={{'x': 1, 'r0_': {cols}}}, reduction_hint=ReductionHint.INNER, filename=__file__,
)
@triton.jit
def {name}(in_ptr0, out_ptr0, ws_ptr, xnumel, r0_numel, R0_BLOCK : tl.constexpr):
    xnumel = 1
    XBLOCK: tl.constexpr = 1
    r0_numel = {cols}
    xoffset = tl.program_id(1) * XBLOCK
    r0_offset = tl.program_id(0) * R0_BLOCK
    r0_index = r0_offset + tl.arange(0, R0_BLOCK)[:]
    r0_mask = r0_index < r0_numel
    tmp0 = tl.load(in_ptr0 + (r0_index), r0_mask, other=0.0)
    tmp2 = ws_ptr.to(tl.pointer_type(tl.uint64)) + xoffset * tl.num_programs(0)
    tmp5 = tl.reduce(tmp0, 0, _triton_helper_fn_add0)
    tmp6 = triton_helpers.exclusive_scan_decoupled_lookback(
        tmp2, tmp5, tl.program_id(0), _triton_helper_fn_add0,
        DTYPE_VALUE_AS_UINT=tl.uint32, DTYPE_PACK=tl.uint64)
    tmp7 = tl.associative_scan(tmp0, 0, _triton_helper_fn_add0)
    tmp8 = _triton_helper_fn_add0(tmp6, tmp7)
    tl.store(out_ptr0 + (r0_index), tl.where(r0_offset == 0, tmp7, tmp8), r0_mask)
"""
    return _module(name, kernel, f"""        arg0_1, = args
        args.clear()
        assert_size_stride(arg0_1, (1, {cols}), ({cols}, 1))
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)
            buf0 = empty_strided_cuda((1, {cols}), ({cols}, 1), torch.float32)
            workspace_0 = empty_strided_cuda((1024, ), (1, ), torch.uint8)
            workspace_0.zero_()
            stream0 = get_raw_stream(0)
            {name}.run(arg0_1, buf0, workspace_0, 1, {cols}, stream=stream0)
            del workspace_0
        return (buf0, )
""")


def mm_template(m: int, n: int, k: int, block: int = 32, grid: int | None = None) -> str:
    """out = a @ b for float32 [m, k] and [k, n] by one of Inductor's Triton matmul templates, as
    max-autotune writes it with Triton as its GEMM backend: the tile and the launch settings are
    the autotuned choice's, constants of the body and of the decorator; call() passes the grid."""
    name = "triton_tem_fused_mm_0"
    tiles = grid if grid is not None else -(-m // block) * -(-n // block)
    kernel = f"""{_RUNTIME}
@triton_heuristics.template(
    num_stages=2,
    num_warps=4,
    triton_meta={{'signature': {{'arg_A': '*fp32', 'arg_B': '*fp32', 'out_ptr0': '*fp32'}}}},
    inductor_meta={{'kernel_name': '{name}', 'grid_type': 'FixedGrid', 'fixed_grid': ['_grid_0', '_grid_1', '_grid_2']}},
)
@triton.jit
def {name}(arg_A, arg_B, out_ptr0):
    GROUP_M : tl.constexpr = 8
    EVEN_K : tl.constexpr = False
    ALLOW_TF32 : tl.constexpr = False
    ACC_TYPE : tl.constexpr = tl.float32
    BLOCK_M : tl.constexpr = {block}
    BLOCK_N : tl.constexpr = {block}
    BLOCK_K : tl.constexpr = 16
    INDEX_DTYPE : tl.constexpr = tl.int32
    A = arg_A
    B = arg_B

    M = {m}
    N = {n}
    K = {k}
    stride_am = {k}
    stride_ak = 1
    stride_bk = {n}
    stride_bn = 1

    pid = tl.program_id(0).to(INDEX_DTYPE)
    grid_m = (M + BLOCK_M - 1) // BLOCK_M
    grid_n = (N + BLOCK_N - 1) // BLOCK_N
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = min(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + (pid % group_size)
    pid_n = (pid % width) // (group_size)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M).to(INDEX_DTYPE)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N).to(INDEX_DTYPE)
    offs_a_m = rm % M
    offs_b_n = rn % N
    offs_k = tl.arange(0, BLOCK_K).to(INDEX_DTYPE)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)
    for k_idx in range(0, tl.cdiv(K, BLOCK_K)):
        a_mask = offs_k[None, :] < (K - k_idx * BLOCK_K)
        b_mask = offs_k[:, None] < (K - k_idx * BLOCK_K)
        a_k_idx_vals = offs_k[None, :] + (k_idx * BLOCK_K)
        b_k_idx_vals = offs_k[:, None] + (k_idx * BLOCK_K)
        idx_m = offs_a_m[:, None]
        idx_n = a_k_idx_vals
        xindex = idx_n + {k}*idx_m
        a = tl.load(A + (xindex), mask=a_mask, other=0.0)
        idx_m = b_k_idx_vals
        idx_n = offs_b_n[None, :]
        xindex = idx_n + {n}*idx_m
        b = tl.load(B + (xindex), mask=b_mask, other=0.0)
        acc += tl.dot(a, b, allow_tf32=ALLOW_TF32, out_dtype=ACC_TYPE)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M).to(INDEX_DTYPE)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N).to(INDEX_DTYPE)
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)
    xindex = idx_n + {n}*idx_m
    tl.store(out_ptr0 + (tl.broadcast_to(xindex, [BLOCK_M, BLOCK_N])), acc, mask)
"""
    return _module(name, kernel, f"""        arg0_1, arg1_1 = args
        args.clear()
        assert_size_stride(arg0_1, ({m}, {k}), ({k}, 1))
        assert_size_stride(arg1_1, ({k}, {n}), ({n}, 1))
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)
            buf0 = empty_strided_cuda(({m}, {n}), ({n}, 1), torch.float32)
            stream0 = get_raw_stream(0)
            {name}.run(arg0_1, arg1_1, buf0, {tiles}, 1, 1, stream=stream0)
            del arg0_1
            del arg1_1
        return (buf0, )
""")
