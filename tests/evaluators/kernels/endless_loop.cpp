// Never returns.
#include <stdint.h>

extern "C" void silu_and_mul(float* out, const float* x, int64_t tokens, int64_t d) {
    volatile int spin = 1;
    while (spin) {
    }
    out[0] = x[0] + static_cast<float>(tokens + d);
}
