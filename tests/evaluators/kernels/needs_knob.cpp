// Builds only when the tuner passes KS_TEST_KNOB=2.
#include <math.h>
#include <stdint.h>

#if !defined(KS_TEST_KNOB) || KS_TEST_KNOB != 2
#error "KS_TEST_KNOB must be 2"
#endif

extern "C" void silu_and_mul(float* out, const float* x, int64_t tokens, int64_t d) {
    for (int64_t t = 0; t < tokens; ++t) {
        const float* gate = x + t * 2 * d;
        for (int64_t i = 0; i < d; ++i) {
            float g = gate[i];
            out[t * d + i] = g / (1.0f + expf(-g)) * gate[d + i];
        }
    }
}
