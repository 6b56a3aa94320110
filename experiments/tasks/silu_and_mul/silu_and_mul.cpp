// silu_and_mul, float32: out[t, i] = silu(x[t, i]) * x[t, d + i].
// A plain first version: one row at a time, scalar loop, libm expf.
#include <math.h>
#include <stdint.h>

extern "C" void silu_and_mul(float* out, const float* x, int64_t tokens, int64_t d) {
    for (int64_t t = 0; t < tokens; ++t) {
        const float* gate = x + t * 2 * d;
        const float* up = gate + d;
        float* row = out + t * d;
        for (int64_t i = 0; i < d; ++i) {
            float g = gate[i];
            row[i] = g / (1.0f + expf(-g)) * up[i];
        }
    }
}
