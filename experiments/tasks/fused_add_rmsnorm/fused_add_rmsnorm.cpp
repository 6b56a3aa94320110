// fused_add_rmsnorm, float32: per row, residual_out = x + residual, then
// x_out = residual_out / sqrt(mean(residual_out^2) + eps) * weight.
// A plain first version: one row at a time, scalar loops, a float accumulator.
#include <math.h>
#include <stdint.h>

extern "C" void fused_add_rmsnorm(float* x_out, float* residual_out, const float* x,
                                  const float* residual, const float* weight, int64_t tokens,
                                  int64_t hidden, float eps) {
    for (int64_t t = 0; t < tokens; ++t) {
        const float* x_row = x + t * hidden;
        const float* res_row = residual + t * hidden;
        float* sum_row = residual_out + t * hidden;
        float* out_row = x_out + t * hidden;
        float sum_sq = 0.0f;
        for (int64_t i = 0; i < hidden; ++i) {
            float s = x_row[i] + res_row[i];
            sum_row[i] = s;
            sum_sq += s * s;
        }
        float inv_rms = 1.0f / sqrtf(sum_sq / (float)hidden + eps);
        for (int64_t i = 0; i < hidden; ++i) {
            out_row[i] = sum_row[i] * inv_rms * weight[i];
        }
    }
}
