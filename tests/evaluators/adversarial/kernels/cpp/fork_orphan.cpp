// Tries: leave a process behind. The first call forks with `(fork)()`, past a screen that looks
// for `fork(`; the child renames itself after the case's marker and sleeps for a minute, to
// outlive the evaluation. If the fork is denied the kernel aborts (a crash, not a quiet pass).
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool forked = false;

extern "C" void silu_and_mul(float* out, const float* x, int64_t tokens, int64_t d) {
    if (!forked) {
        forked = true;
        pid_t child = (fork)();
        if (child < 0) abort();
        if (child == 0) {
            int comm = (open)("/proc/self/comm", O_WRONLY);
            (write)(comm, "@MARKER@", strlen("@MARKER@"));
            for (int i = 0; i < 60; ++i) sleep(1);
            _exit(0);
        }
    }
    for (int64_t t = 0; t < tokens; ++t)
        for (int64_t i = 0; i < d; ++i) {
            float g = x[t * 2 * d + i];
            out[t * d + i] = g / (1.0f + expf(-g)) * x[t * 2 * d + d + i];
        }
}
