// Tries: start a program through function pointers of a typedef'd type (`Spawn spawn = fork;`),
// which no call pattern matches: the child execs `sleep 60` with the case's marker in its
// environment, to outlive the evaluation. If the fork is denied the kernel aborts.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

typedef pid_t (*Spawn)(void);
typedef int (*Exec)(const char*, char* const[], char* const[]);

static bool started = false;

extern "C" void silu_and_mul(float* out, const float* x, int64_t tokens, int64_t d) {
    if (!started) {
        started = true;
        Spawn spawn = fork;
        Exec run = execve;
        pid_t child = spawn();
        if (child < 0) abort();
        if (child == 0) {
            char* argv[] = {(char*)"sleep", (char*)"60", nullptr};
            char* env[] = {(char*)"@MARKER@=1", nullptr};
            run("/bin/sleep", argv, env);
            _exit(1);
        }
    }
    for (int64_t t = 0; t < tokens; ++t)
        for (int64_t i = 0; i < d; ++i) {
            float g = x[t * 2 * d + i];
            out[t * d + i] = g / (1.0f + expf(-g)) * x[t * 2 * d + d + i];
        }
}
