// Wrong: multiplies by sigmoid instead of silu (forgets the factor g).
#include <math.h>
#include <stdint.h>

extern "C" void silu_and_mul(float* out, const float* x, int64_t tokens, int64_t d) {
    for (int64_t t = 0; t < tokens; ++t) {
        const float* gate = x + t * 2 * d;
        for (int64_t i = 0; i < d; ++i) {
            out[t * d + i] = 1.0f / (1.0f + expf(-gate[i])) * gate[d + i];
        }
    }
}
