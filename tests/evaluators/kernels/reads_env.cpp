// Writes garbage when the environment variable named by the knob KS_ENV_VAR is visible to it.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#define KS_STRINGIFY(name) #name
#define KS_NAME(name) KS_STRINGIFY(name)

extern "C" void silu_and_mul(float* out, const float* x, int64_t tokens, int64_t d) {
    const bool leaked = getenv(KS_NAME(KS_ENV_VAR)) != nullptr;
    for (int64_t t = 0; t < tokens; ++t) {
        const float* gate = x + t * 2 * d;
        for (int64_t i = 0; i < d; ++i) {
            float g = gate[i];
            out[t * d + i] = leaked ? 42.0f : g / (1.0f + expf(-g)) * gate[d + i];
        }
    }
}
