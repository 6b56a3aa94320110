// merge_attn_states_lse on the GPU, bf16 or fp16 partial outputs, float32 log-sum-exps: per
// (token, head) pair p, with m = max(lse_a[p], lse_b[p]), w_a = exp(lse_a[p] - m), w_b likewise,
//   out[p, :] = (w_a * o_a[p, :] + w_b * o_b[p, :]) / (w_a + w_b),  out_lse[p] = m + log(w_a + w_b);
// a part with lse -inf weighs nothing, and where both are -inf out is 0 and out_lse is -inf.
// A plain first version, as a serving framework would write it: one block per (token, head)
// pair, each thread striding over head_dim with scalar loads, weights in float. No vectorisation,
// no tuning beyond the block size.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#ifndef BLOCK
#define BLOCK 128  // threads per block; the launcher reads the same knob for the geometry
#endif
static_assert(BLOCK >= 32 && BLOCK <= 1024, "BLOCK must be 32 to 1024 threads");

__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half(v); }

template <typename T>
__device__ void merge_pair(long long pair, T* out, float* out_lse, const T* o_a, const float* lse_a,
                           const T* o_b, const float* lse_b, long long head_dim) {
    const long long start = pair * head_dim;
    const float a = lse_a[pair], b = lse_b[pair];
    const float m = fmaxf(a, b);
    const float neg_inf = -__int_as_float(0x7f800000);
    if (m == neg_inf) {  // neither part attended to a key: exp(-inf - -inf) would be NaN
        for (long long i = threadIdx.x; i < head_dim; i += BLOCK) store(out + start + i, 0.0f);
        if (threadIdx.x == 0) out_lse[pair] = neg_inf;
        return;
    }
    const float w_a = expf(a - m), w_b = expf(b - m);  // exp(-inf) = 0 for an empty part
    const float total = w_a + w_b;
    const float scale_a = w_a / total, scale_b = w_b / total;
    for (long long i = threadIdx.x; i < head_dim; i += BLOCK)
        store(out + start + i, to_float(o_a[start + i]) * scale_a + to_float(o_b[start + i]) * scale_b);
    if (threadIdx.x == 0) out_lse[pair] = logf(total) + m;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
merge_attn_states_lse_bf16(__nv_bfloat16* out, float* out_lse, const __nv_bfloat16* o_a,
                           const float* lse_a, const __nv_bfloat16* o_b, const float* lse_b,
                           long long head_dim, long long rows) {
    // rows: the number of (token, head) pairs, for kernels that give a block several of them
    const long long pair = blockIdx.x;
    merge_pair(pair, out, out_lse, o_a, lse_a, o_b, lse_b, head_dim);
}

extern "C" __global__ void __launch_bounds__(BLOCK)
merge_attn_states_lse_f16(__half* out, float* out_lse, const __half* o_a, const float* lse_a,
                          const __half* o_b, const float* lse_b, long long head_dim,
                          long long rows) {
    const long long pair = blockIdx.x;
    merge_pair(pair, out, out_lse, o_a, lse_a, o_b, lse_b, head_dim);
}
