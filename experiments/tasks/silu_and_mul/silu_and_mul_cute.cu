// silu_and_mul in CuTe: out[t, i] = silu(x[t, i]) * x[t, d + i], 16-bit in and out, float math.
// Each row is viewed as a CuTe tensor of VEC-element vectors, (VEC, d / VEC); a thread loads one
// vector of the gate half and one of the up half with a copy atom of VEC * 16 bits (128-bit at
// VEC = 8) and stores its VEC results, packed in pairs, as one access of the same width; with
// ITEMS > 1 it loads ITEMS such pairs (BLOCK vectors apart) before computing any. The grid is
// (vectors of a row / (BLOCK * ITEMS), rows): small token counts still fill the GPU. A row whose
// length is not a multiple of VEC takes the element-wise path.
#include <cute/tensor.hpp>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#ifndef BLOCK
#define BLOCK 256  // threads per block; the launcher reads the same knob
#endif
#ifndef VEC
#define VEC 8  // elements a thread moves per copy: 8 x 16 bits = one 128-bit access
#endif
#ifndef ITEMS
#define ITEMS 1  // vectors a thread loads before it computes: more bytes in flight per thread
#endif
static_assert(BLOCK >= 32 && BLOCK <= 1024 && BLOCK % 32 == 0, "BLOCK: whole warps, at most 1024");
static_assert(VEC == 2 || VEC == 4 || VEC == 8, "VEC: 2, 4 or 8 elements");
static_assert(ITEMS >= 1 && ITEMS <= 8, "ITEMS: 1 to 8 vectors a thread");

using namespace cute;

// The register type of one VEC-element vector: a copy through it is one VEC * 16-bit access
// (ld.global.v4.u32 at VEC = 8).
using Vector = conditional_t<VEC == 8, uint4, conditional_t<VEC == 4, uint2, uint32_t>>;

// Two results rounded to 16 bits in one instruction and packed into a 32-bit register: the
// output vector is built from whole registers and stored through a Vector-typed tensor, so its
// store stays one access (a copy from a 16-bit register tensor is split into 32-bit stores).
__device__ __forceinline__ uint32_t pack2(bfloat16_t, float a, float b) {
    __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ uint32_t pack2(half_t, float a, float b) {
    __half2 v = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&v);
}

// VEC / 2 packed registers as one Vector value, built whole so that its store is one access.
__device__ __forceinline__ uint4 as_vector(const uint32_t (&w)[4]) {
    return make_uint4(w[0], w[1], w[2], w[3]);
}
__device__ __forceinline__ uint2 as_vector(const uint32_t (&w)[2]) { return make_uint2(w[0], w[1]); }
__device__ __forceinline__ uint32_t as_vector(const uint32_t (&w)[1]) { return w[0]; }

__device__ __forceinline__ float silu_mul(float g, float u) {
    return __fdividef(g, 1.0f + __expf(-g)) * u;
}

template <class T>
__device__ __forceinline__ void silu_and_mul_rows(T* __restrict__ out, const T* __restrict__ x,
                                                  long long d, long long tokens) {
    for (long long row = blockIdx.y; row < tokens; row += gridDim.y) {
        const T* gate = x + row * 2 * d;
        T* o = out + row * d;
        if (d % VEC == 0) {
            const long long vectors = d / VEC;
            // (VEC, vectors) views: the first mode is contiguous, so each column is one vector
            auto layout = make_layout(make_shape(Int<VEC>{}, vectors));
            Tensor g = make_tensor(make_gmem_ptr(gate), layout);
            Tensor u = make_tensor(make_gmem_ptr(gate + d), layout);
            // the output as whole vectors: one store per thread, built from packed registers
            Tensor y = make_tensor(make_gmem_ptr(reinterpret_cast<Vector*>(o)), vectors);
            // ITEMS vectors a thread, BLOCK apart: every load is issued before the first use
            const long long step = (long long)BLOCK * ITEMS;
            for (long long first = (long long)blockIdx.x * step + threadIdx.x; first < vectors;
                 first += (long long)gridDim.x * step) {
                Tensor rg = make_tensor<T>(make_shape(Int<VEC>{}, Int<ITEMS>{}));
                Tensor ru = make_tensor<T>(make_shape(Int<VEC>{}, Int<ITEMS>{}));
                CUTE_UNROLL
                for (int j = 0; j < ITEMS; ++j) {
                    const long long v = first + (long long)j * BLOCK;
                    if (v < vectors) {
                        copy(Copy_Atom<UniversalCopy<Vector>, T>{}, g(_, v), rg(_, j));
                        copy(Copy_Atom<UniversalCopy<Vector>, T>{}, u(_, v), ru(_, j));
                    }
                }
                CUTE_UNROLL
                for (int j = 0; j < ITEMS; ++j) {
                    const long long v = first + (long long)j * BLOCK;
                    if (v >= vectors) break;
                    uint32_t words[VEC / 2];  // the results packed in pairs, whole registers
                    CUTE_UNROLL
                    for (int i = 0; i < VEC / 2; ++i)
                        words[i] = pack2(T{}, silu_mul(float(rg(2 * i, j)), float(ru(2 * i, j))),
                                         silu_mul(float(rg(2 * i + 1, j)),
                                                  float(ru(2 * i + 1, j))));
                    y(v) = as_vector(words);
                }
            }
        } else {
            for (long long i = (long long)blockIdx.x * BLOCK + threadIdx.x; i < d;
                 i += (long long)gridDim.x * BLOCK)
                o[i] = T(silu_mul(float(gate[i]), float(gate[d + i])));
        }
    }
}

extern "C" __global__ void __launch_bounds__(BLOCK)
silu_and_mul_bf16(__nv_bfloat16* out, const __nv_bfloat16* x, long long d, long long tokens) {
    silu_and_mul_rows(reinterpret_cast<bfloat16_t*>(out), reinterpret_cast<const bfloat16_t*>(x),
                      d, tokens);
}

extern "C" __global__ void __launch_bounds__(BLOCK)
silu_and_mul_f16(__half* out, const __half* x, long long d, long long tokens) {
    silu_and_mul_rows(reinterpret_cast<half_t*>(out), reinterpret_cast<const half_t*>(x), d,
                      tokens);
}
