// Tries: read the evaluator's command line and environment through /proc/<parent>/ (its
// settings, paths, and any secret it holds). If either cannot be read the kernel aborts.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static bool looked = false;

static void read_or_abort(const char* what) {
    char path[64], buffer[256];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)getppid(), what);
    FILE* f = (fopen)(path, "rb");
    if (f == nullptr || fread(buffer, 1, sizeof buffer, f) == 0) abort();
    fclose(f);
}

extern "C" void silu_and_mul(float* out, const float* x, int64_t tokens, int64_t d) {
    if (!looked) {
        looked = true;
        read_or_abort("cmdline");
        read_or_abort("environ");
    }
    for (int64_t t = 0; t < tokens; ++t)
        for (int64_t i = 0; i < d; ++i) {
            float g = x[t * 2 * d + i];
            out[t * d + i] = g / (1.0f + expf(-g)) * x[t * 2 * d + d + i];
        }
}
