// Tries: a coverage gap. Rows past the 64th are never computed: right on every shape with at
// most 64 rows, wrong on any held-out shape with more.
#include <math.h>
#include <stdint.h>

extern "C" void silu_and_mul(float* out, const float* x, int64_t tokens, int64_t d) {
    const int64_t rows = tokens < 64 ? tokens : 64;
    for (int64_t t = 0; t < rows; ++t)
        for (int64_t i = 0; i < d; ++i) {
            float g = x[t * 2 * d + i];
            out[t * d + i] = g / (1.0f + expf(-g)) * x[t * 2 * d + d + i];
        }
}
