// Tries: turn a crash into a long TIMEOUT. A forked child keeps every descriptor it inherited
// (the reply pipe among them) open for a minute, then the kernel itself crashes: an evaluator
// that waits for the pipe's end of file waits for the child.
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

extern "C" void silu_and_mul(float* out, const float* x, int64_t tokens, int64_t d) {
    pid_t child = (fork)();
    if (child == 0) {
        int comm = (open)("/proc/self/comm", O_WRONLY);
        (write)(comm, "@MARKER@", strlen("@MARKER@"));
        for (int i = 0; i < 60; ++i) sleep(1);
        _exit(0);
    }
    *(volatile float*)nullptr = out[0] + x[0] + (float)(tokens * d);
}
