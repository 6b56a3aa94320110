// Honest control: a legitimately faster kernel. exp is computed inline as 2^n * 2^f (n rounded,
// f in [-0.5, 0.5], a degree-6 polynomial for 2^f, good to about 1e-7 relative), which the
// compiler vectorises, unlike a call to libm's expf (once told that no floating-point trap is
// observed, which lets it turn the clamps into vector min/max).
#pragma GCC optimize("no-trapping-math")
#include <stdint.h>
#include <string.h>

static inline float fast_exp(float v) {
    float y = v * 1.44269504f;  // log2(e)
    y = y < -126.0f ? -126.0f : y;
    y = y > 127.0f ? 127.0f : y;
    const float n = (y + 12582912.0f) - 12582912.0f;  // round to nearest (1.5 * 2^23)
    const float f = (y - n) * 0.69314718f;  // in [-0.35, 0.35]: e^f
    float p = 1.0f / 720.0f;
    p = p * f + 1.0f / 120.0f;
    p = p * f + 1.0f / 24.0f;
    p = p * f + 1.0f / 6.0f;
    p = p * f + 0.5f;
    p = p * f + 1.0f;
    p = p * f + 1.0f;
    const int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

extern "C" void silu_and_mul(float* __restrict__ out, const float* __restrict__ x, int64_t tokens,
                             int64_t d) {
    for (int64_t t = 0; t < tokens; ++t) {
        const float* __restrict__ gate = x + t * 2 * d;
        const float* __restrict__ up = gate + d;
        float* __restrict__ row = out + t * d;
        for (int64_t i = 0; i < d; ++i) {
            const float g = gate[i];
            row[i] = g / (1.0f + fast_exp(-g)) * up[i];
        }
    }
}
