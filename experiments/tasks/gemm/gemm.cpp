// gemm, float32, row-major: c[i, j] = sum_l a[i, l] * b[l, j].
// A plain first version: one row of C at a time, a scalar dot product per element.
#include <stdint.h>

extern "C" void gemm(float* c, const float* a, const float* b, int64_t m, int64_t n, int64_t k) {
    for (int64_t i = 0; i < m; ++i) {
        const float* a_row = a + i * k;
        float* c_row = c + i * n;
        for (int64_t j = 0; j < n; ++j) {
            float acc = 0.0f;
            for (int64_t l = 0; l < k; ++l) acc += a_row[l] * b[l * n + j];
            c_row[j] = acc;
        }
    }
}
