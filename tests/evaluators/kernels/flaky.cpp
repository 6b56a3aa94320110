// Within tolerance, but not repeatable: every second call moves one element by one ulp.
#include <math.h>
#include <stdint.h>

static int64_t calls = 0;

extern "C" void silu_and_mul(float* out, const float* x, int64_t tokens, int64_t d) {
    for (int64_t t = 0; t < tokens; ++t) {
        const float* gate = x + t * 2 * d;
        for (int64_t i = 0; i < d; ++i) {
            float g = gate[i];
            out[t * d + i] = g / (1.0f + expf(-g)) * gate[d + i];
        }
    }
    if (++calls % 2 == 0) {
        out[0] = nextafterf(out[0], INFINITY);
    }
}
