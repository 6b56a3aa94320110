// Not a cheat: a plain bug (the gate's activation, without the product with the up half). Judged
// after a cheat, it shows whether the cheat's patches still hold: it must stay INCORRECT.
#include <math.h>
#include <stdint.h>

extern "C" void silu_and_mul(float* out, const float* x, int64_t tokens, int64_t d) {
    for (int64_t t = 0; t < tokens; ++t)
        for (int64_t i = 0; i < d; ++i) {
            float g = x[t * 2 * d + i];
            out[t * d + i] = g / (1.0f + expf(-g));
        }
}
