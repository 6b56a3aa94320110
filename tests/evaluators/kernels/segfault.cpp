// Writes through a null pointer (read from a volatile, so the compiler cannot fold it into a trap).
#include <stdint.h>

extern "C" void silu_and_mul(float* out, const float* x, int64_t tokens, int64_t d) {
    volatile uintptr_t address = 0;
    *reinterpret_cast<float*>(address) = x[0];
    out[0] = static_cast<float>(tokens + d);
}
