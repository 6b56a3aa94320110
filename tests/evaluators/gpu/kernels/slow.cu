// Correct, but every element waits on a chain of 256 dependent multiply-adds first.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
__device__ __forceinline__ float silu(float v) { return v / (1.0f + expf(-v)); }
__device__ __forceinline__ float busy(float g) {
    float acc = g;
#pragma unroll 1
    for (int k = 0; k < 256; ++k) acc = acc * 0.5f + g;  // bounded: converges to 2g
    return acc * 0.0f;  // +-0: adds nothing to a finite result
}
extern "C" __global__ void silu_and_mul_bf16(__nv_bfloat16* out, const __nv_bfloat16* x, long long d) {
    const long long row = blockIdx.x;
    for (long long i = threadIdx.x; i < d; i += blockDim.x) {
        const float g = __bfloat162float(x[row * 2 * d + i]);
        const float u = __bfloat162float(x[row * 2 * d + d + i]);
        out[row * d + i] = __float2bfloat16(silu(g) * u + busy(g));
    }
}
extern "C" __global__ void silu_and_mul_f16(__half* out, const __half* x, long long d) {
    const long long row = blockIdx.x;
    for (long long i = threadIdx.x; i < d; i += blockDim.x) {
        const float g = __half2float(x[row * 2 * d + i]);
        const float u = __half2float(x[row * 2 * d + d + i]);
        out[row * d + i] = __float2half(silu(g) * u + busy(g));
    }
}
