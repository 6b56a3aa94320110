// fused_add_rmsnorm in CuTe: residual_out = x + residual; x_out = rmsnorm(residual_out) * weight,
// 16-bit in and out, float math. One block per row (rows past the grid loop). A thread moves
// VEC-element vectors of x, residual and weight with copy atoms of VEC * 16 bits (128-bit at
// VEC = 8). A row of up to BLOCK * ITEMS vectors stays in registers: a thread issues all its
// loads at once, then sums, reduces the sum of squares over the block and scales. A longer row's
// float sums wait in shared memory, a CuTe tensor laid out (VEC, vectors) with the vectors
// contiguous, so that a warp's accesses fall in distinct banks, and a second pass scales them. A
// row whose length is not a multiple of VEC takes the element-wise path. Shared memory: hidden
// floats, passed by the launcher.
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
#define ITEMS 4  // vectors of a row a thread keeps in registers (rows up to BLOCK * ITEMS * VEC)
#endif
static_assert(BLOCK >= 32 && BLOCK <= 1024 && BLOCK % 32 == 0, "BLOCK: whole warps, at most 1024");
static_assert(VEC == 2 || VEC == 4 || VEC == 8, "VEC: 2, 4 or 8 elements");
static_assert(ITEMS >= 1 && ITEMS <= 16, "ITEMS: 1 to 16 vectors a thread");

using namespace cute;

// The register type of one VEC-element vector: a copy through it is one VEC * 16-bit access.
using Vector = conditional_t<VEC == 8, uint4, conditional_t<VEC == 4, uint2, uint32_t>>;

// Two results rounded to 16 bits in one instruction, packed into one 32-bit register; outputs
// are stored through Vector-typed tensors, built whole, so that each store stays one access.
__device__ __forceinline__ uint32_t pack2(bfloat16_t, float a, float b) {
    __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ uint32_t pack2(half_t, float a, float b) {
    __half2 v = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ uint4 as_vector(const uint32_t (&w)[4]) {
    return make_uint4(w[0], w[1], w[2], w[3]);
}
__device__ __forceinline__ uint2 as_vector(const uint32_t (&w)[2]) { return make_uint2(w[0], w[1]); }
__device__ __forceinline__ uint32_t as_vector(const uint32_t (&w)[1]) { return w[0]; }

// The block's sum of `value`, on every thread.
__device__ __forceinline__ float block_sum(float value, float* partial) {
    CUTE_UNROLL
    for (int offset = 16; offset > 0; offset >>= 1)
        value += __shfl_xor_sync(0xffffffffu, value, offset);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) partial[warp] = value;
    __syncthreads();
    value = lane < BLOCK / 32 ? partial[lane] : 0.0f;
    CUTE_UNROLL
    for (int offset = 16; offset > 0; offset >>= 1)
        value += __shfl_xor_sync(0xffffffffu, value, offset);
    return value;
}

template <class T>
__device__ __forceinline__ void fused_add_rmsnorm_rows(
        T* __restrict__ x_out, T* __restrict__ residual_out, const T* __restrict__ x,
        const T* __restrict__ residual, const T* __restrict__ weight, long long hidden, float eps,
        long long tokens) {
    extern __shared__ float sums[];  // hidden floats: this row's x + residual
    __shared__ float partial[BLOCK / 32];
    const bool vectors_fit = hidden % VEC == 0;
    const long long vectors = vectors_fit ? hidden / VEC : 0;
    auto gmem = make_layout(make_shape(Int<VEC>{}, vectors));  // (element, vector) of a row
    // shared: (element, vector) with the vectors contiguous, one bank per thread of a warp
    Tensor s = make_tensor(make_smem_ptr(sums),
                           make_layout(make_shape(Int<VEC>{}, vectors), make_stride(vectors, _1{})));
    Tensor w = make_tensor(make_gmem_ptr(weight), gmem);
    for (long long row = blockIdx.x; row < tokens; row += gridDim.x) {
        const long long base = row * hidden;
        float squares = 0.0f;
        if (vectors_fit && vectors <= (long long)BLOCK * ITEMS) {
            // The row in registers: every load issued before the first use, one pass over HBM.
            Tensor gx = make_tensor(make_gmem_ptr(x + base), gmem);
            Tensor gr = make_tensor(make_gmem_ptr(residual + base), gmem);
            Tensor ro = make_tensor(make_gmem_ptr(reinterpret_cast<Vector*>(residual_out + base)),
                                    vectors);
            Tensor xo = make_tensor(make_gmem_ptr(reinterpret_cast<Vector*>(x_out + base)),
                                    vectors);
            Tensor rx = make_tensor<T>(make_shape(Int<VEC>{}, Int<ITEMS>{}));
            Tensor rr = make_tensor<T>(make_shape(Int<VEC>{}, Int<ITEMS>{}));
            Tensor rw = make_tensor<T>(make_shape(Int<VEC>{}, Int<ITEMS>{}));
            Tensor sum = make_tensor<float>(make_shape(Int<VEC>{}, Int<ITEMS>{}));
            CUTE_UNROLL
            for (int j = 0; j < ITEMS; ++j) {
                const long long v = threadIdx.x + (long long)j * BLOCK;
                if (v < vectors) {
                    copy(Copy_Atom<UniversalCopy<Vector>, T>{}, gx(_, v), rx(_, j));
                    copy(Copy_Atom<UniversalCopy<Vector>, T>{}, gr(_, v), rr(_, j));
                    copy(Copy_Atom<UniversalCopy<Vector>, T>{}, w(_, v), rw(_, j));
                }
            }
            CUTE_UNROLL
            for (int j = 0; j < ITEMS; ++j) {
                const long long v = threadIdx.x + (long long)j * BLOCK;
                if (v >= vectors) break;
                uint32_t words[VEC / 2];
                CUTE_UNROLL
                for (int i = 0; i < VEC; i += 2) {
                    sum(i, j) = float(rx(i, j)) + float(rr(i, j));
                    sum(i + 1, j) = float(rx(i + 1, j)) + float(rr(i + 1, j));
                    squares += sum(i, j) * sum(i, j) + sum(i + 1, j) * sum(i + 1, j);
                    words[i / 2] = pack2(T{}, sum(i, j), sum(i + 1, j));
                }
                ro(v) = as_vector(words);
            }
            const float inv_rms = rsqrtf(block_sum(squares, partial) / float(hidden) + eps);
            CUTE_UNROLL
            for (int j = 0; j < ITEMS; ++j) {
                const long long v = threadIdx.x + (long long)j * BLOCK;
                if (v >= vectors) break;
                uint32_t words[VEC / 2];
                CUTE_UNROLL
                for (int i = 0; i < VEC; i += 2)
                    words[i / 2] = pack2(T{}, sum(i, j) * inv_rms * float(rw(i, j)),
                                         sum(i + 1, j) * inv_rms * float(rw(i + 1, j)));
                xo(v) = as_vector(words);
            }
            __syncthreads();  // the next row overwrites partial
            continue;
        }
        if (vectors_fit) {
            Tensor gx = make_tensor(make_gmem_ptr(x + base), gmem);
            Tensor gr = make_tensor(make_gmem_ptr(residual + base), gmem);
            Tensor ro = make_tensor(make_gmem_ptr(reinterpret_cast<Vector*>(residual_out + base)),
                                    vectors);
            for (long long v = threadIdx.x; v < vectors; v += BLOCK) {
                Tensor rx = make_tensor<T>(Int<VEC>{});
                Tensor rr = make_tensor<T>(Int<VEC>{});
                copy(Copy_Atom<UniversalCopy<Vector>, T>{}, gx(_, v), rx);
                copy(Copy_Atom<UniversalCopy<Vector>, T>{}, gr(_, v), rr);
                uint32_t words[VEC / 2];
                CUTE_UNROLL
                for (int i = 0; i < VEC; i += 2) {
                    const float a = float(rx(i)) + float(rr(i));
                    const float b = float(rx(i + 1)) + float(rr(i + 1));
                    squares += a * a + b * b;
                    s(i, v) = a;
                    s(i + 1, v) = b;
                    words[i / 2] = pack2(T{}, a, b);
                }
                ro(v) = as_vector(words);
            }
        } else {
            for (long long i = threadIdx.x; i < hidden; i += BLOCK) {
                const float a = float(x[base + i]) + float(residual[base + i]);
                squares += a * a;
                sums[i] = a;
                residual_out[base + i] = T(a);
            }
        }
        const float inv_rms = rsqrtf(block_sum(squares, partial) / float(hidden) + eps);
        if (vectors_fit) {
            Tensor xo = make_tensor(make_gmem_ptr(reinterpret_cast<Vector*>(x_out + base)),
                                    vectors);
            for (long long v = threadIdx.x; v < vectors; v += BLOCK) {
                Tensor rw = make_tensor<T>(Int<VEC>{});
                copy(Copy_Atom<UniversalCopy<Vector>, T>{}, w(_, v), rw);
                uint32_t words[VEC / 2];
                CUTE_UNROLL
                for (int i = 0; i < VEC; i += 2)
                    words[i / 2] = pack2(T{}, s(i, v) * inv_rms * float(rw(i)),
                                         s(i + 1, v) * inv_rms * float(rw(i + 1)));
                xo(v) = as_vector(words);
            }
        } else {
            for (long long i = threadIdx.x; i < hidden; i += BLOCK)
                x_out[base + i] = T(sums[i] * inv_rms * float(weight[i]));
        }
        __syncthreads();  // the next row overwrites sums and partial
    }
}

extern "C" __global__ void __launch_bounds__(BLOCK)
fused_add_rmsnorm_bf16(__nv_bfloat16* x_out, __nv_bfloat16* residual_out, const __nv_bfloat16* x,
                       const __nv_bfloat16* residual, const __nv_bfloat16* weight, long long hidden,
                       float eps, long long tokens) {
    fused_add_rmsnorm_rows(reinterpret_cast<bfloat16_t*>(x_out),
                           reinterpret_cast<bfloat16_t*>(residual_out),
                           reinterpret_cast<const bfloat16_t*>(x),
                           reinterpret_cast<const bfloat16_t*>(residual),
                           reinterpret_cast<const bfloat16_t*>(weight), hidden, eps, tokens);
}

extern "C" __global__ void __launch_bounds__(BLOCK)
fused_add_rmsnorm_f16(__half* x_out, __half* residual_out, const __half* x, const __half* residual,
                      const __half* weight, long long hidden, float eps, long long tokens) {
    fused_add_rmsnorm_rows(reinterpret_cast<half_t*>(x_out), reinterpret_cast<half_t*>(residual_out),
                           reinterpret_cast<const half_t*>(x),
                           reinterpret_cast<const half_t*>(residual),
                           reinterpret_cast<const half_t*>(weight), hidden, eps, tokens);
}
