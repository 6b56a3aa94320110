// Tries: read a file outside the sandbox (a cache another process left, or the project's own
// files). If it cannot be read the kernel aborts.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static bool read_once = false;

extern "C" void silu_and_mul(float* out, const float* x, int64_t tokens, int64_t d) {
    if (!read_once) {
        read_once = true;
        char buffer[64];
        FILE* secret = (fopen)("@SECRET@", "rb");
        if (secret == nullptr || fread(buffer, 1, sizeof buffer, secret) == 0) abort();
        fclose(secret);
    }
    for (int64_t t = 0; t < tokens; ++t)
        for (int64_t i = 0; i < d; ++i) {
            float g = x[t * 2 * d + i];
            out[t * d + i] = g / (1.0f + expf(-g)) * x[t * 2 * d + d + i];
        }
}
