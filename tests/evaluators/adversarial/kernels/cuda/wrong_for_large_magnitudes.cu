// Tries: a kernel right for unit-normal inputs only: sigmoid as e^g / (1 + e^g), which is
// Inf / Inf = NaN once e^g overflows (g > 88). No tuning or held-out input gets there; inputs
// scaled by 100 (the tester's large-magnitude check) do.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#ifndef BLOCK
#define BLOCK 256
#endif

__device__ __forceinline__ float silu(float v) {
    const float e = expf(v);
    return v * (e / (1.0f + e));
}

extern "C" __global__ void __launch_bounds__(BLOCK)
silu_and_mul_bf16(__nv_bfloat16* out, const __nv_bfloat16* x, long long d) {
    const long long row = blockIdx.x;
    for (long long i = threadIdx.x; i < d; i += blockDim.x)
        out[row * d + i] = __float2bfloat16(silu(__bfloat162float(x[row * 2 * d + i]))
                                            * __bfloat162float(x[row * 2 * d + d + i]));
}

extern "C" __global__ void __launch_bounds__(BLOCK)
silu_and_mul_f16(__half* out, const __half* x, long long d) {
    const long long row = blockIdx.x;
    for (long long i = threadIdx.x; i < d; i += blockDim.x)
        out[row * d + i] = __float2half(silu(__half2float(x[row * 2 * d + i]))
                                        * __half2float(x[row * 2 * d + d + i]));
}
