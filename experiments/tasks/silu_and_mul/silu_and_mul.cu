// silu_and_mul on the GPU: out[t, i] = silu(x[t, i]) * x[t, d + i], bf16 or fp16 in and out.
// A plain first version, as a serving framework would write it: one block per row (token),
// each thread striding over the row with scalar loads, arithmetic in float. No vectorisation,
// no tuning beyond the block size.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#ifndef BLOCK
#define BLOCK 256  // threads per block; the launcher reads the same knob for the geometry
#endif

__device__ __forceinline__ float silu(float v) { return v / (1.0f + expf(-v)); }

extern "C" __global__ void __launch_bounds__(BLOCK)
silu_and_mul_bf16(__nv_bfloat16* out, const __nv_bfloat16* x, long long d) {
    const long long row = blockIdx.x;
    const __nv_bfloat16* gate = x + row * 2 * d;
    const __nv_bfloat16* up = gate + d;
    for (long long i = threadIdx.x; i < d; i += blockDim.x) {
        const float g = __bfloat162float(gate[i]);
        const float u = __bfloat162float(up[i]);
        out[row * d + i] = __float2bfloat16(silu(g) * u);
    }
}

extern "C" __global__ void __launch_bounds__(BLOCK)
silu_and_mul_f16(__half* out, const __half* x, long long d) {
    const long long row = blockIdx.x;
    const __half* gate = x + row * 2 * d;
    const __half* up = gate + d;
    for (long long i = threadIdx.x; i < d; i += blockDim.x) {
        const float g = __half2float(gate[i]);
        const float u = __half2float(up[i]);
        out[row * d + i] = __float2half(silu(g) * u);
    }
}
