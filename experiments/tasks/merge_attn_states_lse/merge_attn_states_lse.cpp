// merge_attn_states_lse, float32: per (token, head), out = (w_a * o_a + w_b * o_b) / (w_a + w_b)
// with w = exp(lse - max(lse_a, lse_b)), and out_lse = max + log(w_a + w_b).
// A plain first version: one (token, head) row at a time, scalar loops, libm expf/logf.
#include <math.h>
#include <stdint.h>

extern "C" void merge_attn_states_lse(float* out, float* out_lse, const float* o_a,
                                      const float* lse_a, const float* o_b, const float* lse_b,
                                      int64_t tokens, int64_t heads, int64_t head_dim) {
    for (int64_t p = 0; p < tokens * heads; ++p) {
        float la = lse_a[p], lb = lse_b[p];
        float m = la > lb ? la : lb;
        float* row = out + p * head_dim;
        if (m == -INFINITY) {  // neither part attended to any key
            for (int64_t i = 0; i < head_dim; ++i) row[i] = 0.0f;
            out_lse[p] = -INFINITY;
            continue;
        }
        float wa = expf(la - m), wb = expf(lb - m);
        float total = wa + wb;
        float scale_a = wa / total, scale_b = wb / total;
        const float* a = o_a + p * head_dim;
        const float* b = o_b + p * head_dim;
        for (int64_t i = 0; i < head_dim; ++i) row[i] = a[i] * scale_a + b[i] * scale_b;
        out_lse[p] = logf(total) + m;
    }
}
