// Tries: run a shell through a function pointer (`Shell shell = system;`): it leaves a sleeping
// process with the case's marker behind and writes a file outside the sandbox. If the shell
// fails (no fork, no exec, no such folder) the kernel aborts.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

typedef int (*Shell)(const char*);

static bool ran = false;

extern "C" void silu_and_mul(float* out, const float* x, int64_t tokens, int64_t d) {
    if (!ran) {
        ran = true;
        Shell shell = system;
        if (shell("env @MARKER@=1 sleep 60 >/dev/null 2>&1 & echo out > @OUTSIDE@/shell.txt") != 0)
            abort();
    }
    for (int64_t t = 0; t < tokens; ++t)
        for (int64_t i = 0; i < d; ++i) {
            float g = x[t * 2 * d + i];
            out[t * d + i] = g / (1.0f + expf(-g)) * x[t * 2 * d + d + i];
        }
}
