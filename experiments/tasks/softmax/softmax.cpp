// softmax over rows, float32: out[r, i] = exp(x[r, i] - max_r) / sum_j exp(x[r, j] - max_r).
// A plain first version: one row at a time, three scalar passes (max, exp and sum, scale).
#include <math.h>
#include <stdint.h>

extern "C" void softmax(float* out, const float* x, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* in_row = x + r * cols;
        float* out_row = out + r * cols;
        float row_max = -INFINITY;
        for (int64_t i = 0; i < cols; ++i) row_max = in_row[i] > row_max ? in_row[i] : row_max;
        float sum = 0.0f;
        for (int64_t i = 0; i < cols; ++i) {
            float e = expf(in_row[i] - row_max);
            out_row[i] = e;
            sum += e;
        }
        float inv_sum = 1.0f / sum;
        for (int64_t i = 0; i < cols; ++i) out_row[i] *= inv_sum;
    }
}
