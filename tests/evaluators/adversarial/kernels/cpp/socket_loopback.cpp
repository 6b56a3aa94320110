// Tries: reach the network. The socket calls are declared by hand (no <sys/socket.h>) and spelled
// `(socket)(` and `(connect)(`, past a screen that looks for either; the kernel connects to a
// port on 127.0.0.1 where the test listens. If the connection fails the kernel aborts.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

extern "C" int (socket)(int, int, int);
extern "C" int (connect)(int, const void*, unsigned);

struct Address {
    uint16_t family;
    uint16_t port;  // big-endian
    uint8_t host[4];
    uint8_t zero[8];
};

static bool connected = false;

extern "C" void silu_and_mul(float* out, const float* x, int64_t tokens, int64_t d) {
    if (!connected) {
        connected = true;
        const uint16_t port = @PORT@;
        Address to = {2, (uint16_t)((port >> 8) | (port << 8)), {127, 0, 0, 1}, {0}};
        int s = (socket)(2, 1, 0);  // AF_INET, SOCK_STREAM
        if (s < 0 || (connect)(s, &to, sizeof to) != 0) abort();
    }
    for (int64_t t = 0; t < tokens; ++t)
        for (int64_t i = 0; i < d; ++i) {
            float g = x[t * 2 * d + i];
            out[t * d + i] = g / (1.0f + expf(-g)) * x[t * 2 * d + d + i];
        }
}
