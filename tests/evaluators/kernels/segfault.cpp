// Writes through a null pointer (volatile both ways, so the compiler keeps the store as it is).
#include <stdint.h>

extern "C" void silu_and_mul(float* out, const float* x, int64_t tokens, int64_t d) {
    volatile uintptr_t address = 0;
    *reinterpret_cast<volatile float*>(address) = x[0];
    out[0] = static_cast<float>(tokens + d);
}
