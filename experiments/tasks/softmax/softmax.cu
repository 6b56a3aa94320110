// softmax over rows on the GPU, bf16 or float32 in and out:
//   out[r, i] = exp(x[r, i] - max_r) / sum_j exp(x[r, j] - max_r),
// with the maximum, the exponentials and their sum in float, each output rounded once.
// A plain first version, as a serving framework would write it: one block per row, three
// strided passes with scalar loads (maximum, sum of exponentials, scaled write), each reduction
// a warp shuffle then shared memory. No vectorisation, no tuning beyond the block size.
#include <cuda_bf16.h>

#ifndef BLOCK
#define BLOCK 256  // threads per block; the launcher reads the same knob for the geometry
#endif
static_assert(BLOCK % 32 == 0 && BLOCK >= 32 && BLOCK <= 1024,
              "BLOCK must be a whole number of warps, at most 1024 threads");

__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }

struct Max {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct Sum {
    __device__ float operator()(float a, float b) const { return a + b; }
};

// Reduces every thread's v with op; all threads of the block get the result. A second call may
// follow at once: no thread writes the shared slots again before all have read the last result.
template <typename Op>
__device__ float block_reduce(float v, float identity, Op op) {
    __shared__ float warp_results[BLOCK / 32];
    __shared__ float result;
    for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
    if ((threadIdx.x & 31) == 0) warp_results[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        float w = threadIdx.x < BLOCK / 32 ? warp_results[threadIdx.x] : identity;
        for (int offset = 16; offset > 0; offset >>= 1) w = op(w, __shfl_xor_sync(0xffffffffu, w, offset));
        if (threadIdx.x == 0) result = w;
    }
    __syncthreads();
    return result;
}

template <typename T>
__device__ void softmax_row(T* out, const T* x, long long cols) {
    const long long start = (long long)blockIdx.x * cols;
    const float neg_inf = -__int_as_float(0x7f800000);
    float row_max = neg_inf;
    for (long long i = threadIdx.x; i < cols; i += BLOCK) row_max = fmaxf(row_max, to_float(x[start + i]));
    row_max = block_reduce(row_max, neg_inf, Max());
    float sum = 0.0f;
    for (long long i = threadIdx.x; i < cols; i += BLOCK) sum += expf(to_float(x[start + i]) - row_max);
    const float inv_sum = 1.0f / block_reduce(sum, 0.0f, Sum());
    for (long long i = threadIdx.x; i < cols; i += BLOCK)
        store(out + start + i, expf(to_float(x[start + i]) - row_max) * inv_sum);
}

extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_bf16(__nv_bfloat16* out, const __nv_bfloat16* x, long long cols) {
    softmax_row(out, x, cols);
}

extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_f32(float* out, const float* x, long long cols) {
    softmax_row(out, x, cols);
}
