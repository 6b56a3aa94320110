"""Kernel structures for cuda: whole kernels written once for a calling contract, not micro-edits.

A micro-rewrite keeps the kernel's structure (one block per row, threads striding over it); some
gains need another structure. Each structure here is a template for one family's contract (the
kernel names and parameters the task's launcher calls, docs/tasks.md): it applies to a source
that defines those ``extern "C"`` kernels with those parameters, and replaces the whole source.
The launcher recognises the structure by its geometry knob and launches it as it needs.

- ``warp_rows`` (row reductions, the fused_add_rmsnorm contract): one warp per row, ``ROWS``
  rows (warps) per block along ``threadIdx.y``; 16-byte vectors where the row's length and
  addresses allow (a scalar path otherwise, odd sizes included); a row of at most
  ``32 * VEC * ITEMS`` elements is held in registers (x and residual read once), a longer one
  takes two passes (the second reads the inputs again). No shared memory, no barrier. The
  launcher: block ``(32, ROWS)``, ``ceil(tokens / ROWS)`` blocks, the row count passed last.
- ``stream`` (elementwise, the silu_and_mul contract): a grid sized to the GPU (``WAVES`` times
  the blocks that fit on an SM, times its SM count: ``fn.device``), each thread striding over
  16-byte chunks of the output with streaming loads and stores (``__ldcs``/``__stcs``: data read
  once is evicted first, sparing L2 for what is reused); a scalar path where a row's length or
  address does not allow 16-byte chunks. The launcher passes the token count last.

Both keep the reference's arithmetic (float accumulation, one rounding per output) and read
every element before writing it, by the thread that writes it, so they stay correct in place.
"""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import Any

from kernelswarm.search import MEMORY
from kernelswarm.search import STRUCTURE_MARKER as MARKER

from .clike import mask
from .cuda_source import device_functions
from .transformation import KnobSpace, Transformation

_COMMON = r"""#include <cuda_bf16.h>
#include <cuda_fp16.h>

__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ void put(__nv_bfloat16& d, float v) { d = __float2bfloat16(v); }
__device__ __forceinline__ void put(__half& d, float v) { d = __float2half(v); }

template <typename T>
__device__ __forceinline__ bool aligned_to(const T* p, unsigned long long bytes) {
    return reinterpret_cast<unsigned long long>(p) % bytes == 0;
}
"""

WARP_ROWS = "// " + MARKER + r""" warp_rows
// fused_add_rmsnorm as a row reduction: one warp per row, ROWS rows per block (threadIdx.y),
// 16-byte vectors where the row allows them; a row of at most 32 * VEC * ITEMS elements is held
// in registers (x and residual read once), a longer one takes two passes. Float accumulation,
// each output rounded once; every element is read before it is written, by the thread that
// writes it, so the kernel is correct in place.
""" + _COMMON + r"""
#ifndef ROWS
#define ROWS 4  // rows (warps) per block; the launcher reads the same knob
#endif
#ifndef VEC
#define VEC 8  // elements per vector access: 8 x 2 bytes = 16 bytes
#endif
#ifndef ITEMS
#define ITEMS 16  // vectors per lane held in registers: rows up to 32 * VEC * ITEMS in one pass
#endif
static_assert(ROWS >= 1 && 32 * ROWS <= 1024, "ROWS warps must fit a block");

template <typename T> struct alignas(sizeof(T) * VEC) Pack { T v[VEC]; };

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

template <typename T>
__device__ void rmsnorm_row(T* x_out, T* residual_out, const T* x, const T* residual,
                            const T* weight, long long hidden, float eps, long long rows) {
    const long long row = (long long)blockIdx.x * ROWS + threadIdx.y;
    if (row >= rows) return;  // the whole warp leaves: no shuffle misses a lane
    const int lane = threadIdx.x;
    const long long start = row * hidden;
    const unsigned long long bytes = sizeof(T) * VEC;
    // Row starts are multiples of hidden: with hidden % VEC == 0 and aligned bases, every
    // vector of every row is aligned.
    const bool vectors = hidden % VEC == 0 && aligned_to(x, bytes) && aligned_to(residual, bytes)
                         && aligned_to(weight, bytes) && aligned_to(x_out, bytes)
                         && aligned_to(residual_out, bytes);
    if (vectors && hidden <= 32LL * VEC * ITEMS) {
        float s[ITEMS][VEC];
        float sum_sq = 0.0f;
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const long long i = ((long long)k * 32 + lane) * VEC;
            if (i < hidden) {
                const Pack<T> a = *reinterpret_cast<const Pack<T>*>(x + start + i);
                const Pack<T> b = *reinterpret_cast<const Pack<T>*>(residual + start + i);
#pragma unroll
                for (int j = 0; j < VEC; ++j) {
                    s[k][j] = to_float(a.v[j]) + to_float(b.v[j]);
                    sum_sq += s[k][j] * s[k][j];
                }
            }
        }
        const float inv_rms = rsqrtf(warp_sum(sum_sq) / (float)hidden + eps);
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const long long i = ((long long)k * 32 + lane) * VEC;
            if (i < hidden) {
                const Pack<T> w = *reinterpret_cast<const Pack<T>*>(weight + i);
                Pack<T> r, o;
#pragma unroll
                for (int j = 0; j < VEC; ++j) {
                    put(r.v[j], s[k][j]);
                    put(o.v[j], s[k][j] * inv_rms * to_float(w.v[j]));
                }
                *reinterpret_cast<Pack<T>*>(residual_out + start + i) = r;
                *reinterpret_cast<Pack<T>*>(x_out + start + i) = o;
            }
        }
        return;
    }
    // Two passes: the sum of squares, then the inputs read again (vectors where they fit).
    const long long step = vectors ? 32LL * VEC : 32LL;
    const int width = vectors ? VEC : 1;
    float sum_sq = 0.0f;
    for (long long i = (long long)lane * width; i < hidden; i += step) {
        for (int j = 0; j < width; ++j) {
            const float s = to_float(x[start + i + j]) + to_float(residual[start + i + j]);
            sum_sq += s * s;
        }
    }
    const float inv_rms = rsqrtf(warp_sum(sum_sq) / (float)hidden + eps);
    for (long long i = (long long)lane * width; i < hidden; i += step) {
        for (int j = 0; j < width; ++j) {
            const float s = to_float(x[start + i + j]) + to_float(residual[start + i + j]);
            put(residual_out[start + i + j], s);
            put(x_out[start + i + j], s * inv_rms * to_float(weight[i + j]));
        }
    }
}

extern "C" __global__ void __launch_bounds__(32 * ROWS)
fused_add_rmsnorm_bf16(__nv_bfloat16* x_out, __nv_bfloat16* residual_out, const __nv_bfloat16* x,
                       const __nv_bfloat16* residual, const __nv_bfloat16* weight, long long hidden,
                       float eps, long long rows) {
    rmsnorm_row(x_out, residual_out, x, residual, weight, hidden, eps, rows);
}

extern "C" __global__ void __launch_bounds__(32 * ROWS)
fused_add_rmsnorm_f16(__half* x_out, __half* residual_out, const __half* x, const __half* residual,
                      const __half* weight, long long hidden, float eps, long long rows) {
    rmsnorm_row(x_out, residual_out, x, residual, weight, hidden, eps, rows);
}
"""

STREAM = "// " + MARKER + r""" stream
// silu_and_mul as a streaming elementwise kernel: a grid sized to the GPU by the launcher
// (WAVES x resident blocks per SM x SM count), each thread striding over 16-byte chunks of the
// output with streaming loads and stores (read once, evicted first); a scalar path where a
// row's length or address does not allow 16-byte chunks.
""" + _COMMON + r"""
#ifndef BLOCK
#define BLOCK 256  // threads per block; the launcher reads the same knob
#endif
#ifndef WAVES
#define WAVES 1  // grid = WAVES x the blocks resident on the GPU; the launcher reads it
#endif

__device__ __forceinline__ float silu(float v) { return v / (1.0f + expf(-v)); }

template <typename T>
__device__ void silu_and_mul_stream(T* out, const T* x, long long d, long long tokens) {
    constexpr int VEC = 16 / sizeof(T);
    const long long stride = (long long)gridDim.x * BLOCK;
    const long long first = (long long)blockIdx.x * BLOCK + threadIdx.x;
    if (d % VEC == 0 && aligned_to(x, 16) && aligned_to(out, 16)) {
        const long long chunks = d / VEC;
        const long long total = tokens * chunks;
        for (long long c = first; c < total; c += stride) {
            const long long row = c / chunks;
            const long long i = (c - row * chunks) * VEC;
            const uint4 g = __ldcs(reinterpret_cast<const uint4*>(x + row * 2 * d + i));
            const uint4 u = __ldcs(reinterpret_cast<const uint4*>(x + row * 2 * d + d + i));
            const T* gv = reinterpret_cast<const T*>(&g);
            const T* uv = reinterpret_cast<const T*>(&u);
            uint4 o;
            T* ov = reinterpret_cast<T*>(&o);
#pragma unroll
            for (int j = 0; j < VEC; ++j) put(ov[j], silu(to_float(gv[j])) * to_float(uv[j]));
            __stcs(reinterpret_cast<uint4*>(out + row * d + i), o);
        }
        return;
    }
    const long long total = tokens * d;
    for (long long e = first; e < total; e += stride) {
        const long long row = e / d;
        const long long i = e - row * d;
        put(out[e], silu(to_float(x[row * 2 * d + i])) * to_float(x[row * 2 * d + d + i]));
    }
}

extern "C" __global__ void __launch_bounds__(BLOCK)
silu_and_mul_bf16(__nv_bfloat16* out, const __nv_bfloat16* x, long long d, long long tokens) {
    silu_and_mul_stream(out, x, d, tokens);
}

extern "C" __global__ void __launch_bounds__(BLOCK)
silu_and_mul_f16(__half* out, const __half* x, long long d, long long tokens) {
    silu_and_mul_stream(out, x, d, tokens);
}
"""


def _kernels(source: str) -> dict[str, int]:
    """``extern "C"`` kernel name -> its parameter count."""
    return {f.name: len(f.parameters) for f in device_functions(source)
            if f.is_kernel and re.search(r"\bextern\b", f.head)}


class Structure(Transformation):
    """A whole-kernel template for one contract (see the module docstring): applies to a source
    defining exactly ``contract``'s kernels (name -> parameter count) and not already this
    structure; the result is the template, with its own knob space.

    Unlike a micro-rewrite, a structure replaces the kernel, so no knob value gives back the
    kernel it replaced (the Transformation contract's "first value: as before" does not hold);
    the parent's knobs that the structure also has keep their values."""

    contract: dict[str, int]
    template: str
    space: dict[str, tuple[Any, ...]]

    def apply(self, source: str, knob_space: KnobSpace) -> tuple[str, dict[str, tuple[Any, ...]]] | None:
        if MARKER in source or "__route" in mask(source):  # a structure, or a dispatch kernel
            return None
        if _kernels(source) != self.contract:
            return None
        return self.template, dict(self.space)


class WarpRows(Structure):
    name = "warp_rows"
    languages = ("cuda",)
    stage = MEMORY
    description = ("rewrite the row reduction as one warp per row, ROWS rows per block, the row "
                   "held in registers where it fits and two passes where not, 16-byte vectors")
    adds_knobs = ("ROWS", "VEC", "ITEMS")
    initial_knobs = MappingProxyType({"ROWS": 4, "VEC": 8, "ITEMS": 16})
    contract = {"fused_add_rmsnorm_bf16": 7, "fused_add_rmsnorm_f16": 7}
    template = WARP_ROWS
    space = {"ROWS": (4, 1, 2, 8, 16), "VEC": (8, 4, 2), "ITEMS": (16, 4, 8, 32)}


class Stream(Structure):
    name = "stream"
    languages = ("cuda",)
    stage = MEMORY
    description = ("rewrite the elementwise kernel as a grid sized to the GPU's SMs and "
                   "occupancy, 16-byte vectors with streaming (evict-first) loads and stores")
    adds_knobs = ("WAVES",)
    initial_knobs = MappingProxyType({"WAVES": 2})
    contract = {"silu_and_mul_bf16": 3, "silu_and_mul_f16": 3}
    template = STREAM
    space = {"BLOCK": (256, 128, 512, 1024), "WAVES": (1, 2, 4, 8)}
