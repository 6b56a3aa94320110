// Right, but computes every row ten times over (a fence keeps the compiler from merging passes).
#include <atomic>
#include <math.h>
#include <stdint.h>

extern "C" void silu_and_mul(float* out, const float* x, int64_t tokens, int64_t d) {
    for (int pass = 0; pass < 10; ++pass) {
        for (int64_t t = 0; t < tokens; ++t) {
            const float* gate = x + t * 2 * d;
            for (int64_t i = 0; i < d; ++i) {
                float g = gate[i];
                out[t * d + i] = g / (1.0f + expf(-g)) * gate[d + i];
            }
        }
        std::atomic_signal_fence(std::memory_order_seq_cst);
    }
}
