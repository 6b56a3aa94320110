// Honest control: a legitimately faster kernel. Four elements at a time with SSE2 (every x86-64
// has it), exp computed inline as 2^n * e^f (n rounded, |f| <= ln2/2, a degree-6 polynomial for
// e^f, good to about 1e-7 relative) instead of a scalar call to libm's expf per element.
#include <emmintrin.h>
#include <math.h>
#include <stdint.h>

static inline __m128 exp4(__m128 v) {
    __m128 y = _mm_mul_ps(v, _mm_set1_ps(1.44269504f));  // log2(e)
    y = _mm_max_ps(_mm_min_ps(y, _mm_set1_ps(127.0f)), _mm_set1_ps(-126.0f));
    const __m128i n = _mm_cvtps_epi32(y);  // rounded to nearest
    const __m128 f = _mm_mul_ps(_mm_sub_ps(y, _mm_cvtepi32_ps(n)), _mm_set1_ps(0.69314718f));
    __m128 p = _mm_set1_ps(1.0f / 720.0f);
    p = _mm_add_ps(_mm_mul_ps(p, f), _mm_set1_ps(1.0f / 120.0f));
    p = _mm_add_ps(_mm_mul_ps(p, f), _mm_set1_ps(1.0f / 24.0f));
    p = _mm_add_ps(_mm_mul_ps(p, f), _mm_set1_ps(1.0f / 6.0f));
    p = _mm_add_ps(_mm_mul_ps(p, f), _mm_set1_ps(0.5f));
    p = _mm_add_ps(_mm_mul_ps(p, f), _mm_set1_ps(1.0f));
    p = _mm_add_ps(_mm_mul_ps(p, f), _mm_set1_ps(1.0f));
    const __m128i scale = _mm_slli_epi32(_mm_add_epi32(n, _mm_set1_epi32(127)), 23);
    return _mm_mul_ps(p, _mm_castsi128_ps(scale));
}

extern "C" void silu_and_mul(float* out, const float* x, int64_t tokens, int64_t d) {
    const __m128 one = _mm_set1_ps(1.0f);
    const __m128 zero = _mm_setzero_ps();
    for (int64_t t = 0; t < tokens; ++t) {
        const float* gate = x + t * 2 * d;
        const float* up = gate + d;
        float* row = out + t * d;
        int64_t i = 0;
        for (; i + 4 <= d; i += 4) {
            const __m128 g = _mm_loadu_ps(gate + i);
            const __m128 sig = _mm_div_ps(g, _mm_add_ps(one, exp4(_mm_sub_ps(zero, g))));
            _mm_storeu_ps(row + i, _mm_mul_ps(sig, _mm_loadu_ps(up + i)));
        }
        for (; i < d; ++i) row[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
    }
}
