// silu_and_mul, float32, with one knob for `kernelswarm tune`: UNROLL, the elements of a row
// each pass of the inner loop computes (independent expf calls the compiler may interleave).
// Not the task's starting kernel; an example to tune:
//   kernelswarm tune silu_and_mul --kernel silu_and_mul_unroll.cpp --knob UNROLL=1,2,4,8 --trials 4
#include <math.h>
#include <stdint.h>

#ifndef UNROLL
#define UNROLL 1  // the value the kernel has when built without -DUNROLL=...
#endif

extern "C" void silu_and_mul(float* out, const float* x, int64_t tokens, int64_t d) {
    for (int64_t t = 0; t < tokens; ++t) {
        const float* gate = x + t * 2 * d;
        const float* up = gate + d;
        float* row = out + t * d;
        int64_t i = 0;
        for (; i + UNROLL <= d; i += UNROLL) {
            for (int u = 0; u < UNROLL; ++u) {  // a constant trip count: unrolled when built
                float g = gate[i + u];
                row[i + u] = g / (1.0f + expf(-g)) * up[i + u];
            }
        }
        for (; i < d; ++i) {  // the row's tail, fewer than UNROLL elements
            float g = gate[i];
            row[i] = g / (1.0f + expf(-g)) * up[i];
        }
    }
}
