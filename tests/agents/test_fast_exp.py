"""Accuracy of fast_exp as a kernel gets it: a kernel calling expf is rewritten by the
transformation, compiled with a measuring main() into an executable, and run in a subprocess."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kernelswarm.agents import TRANSFORMATIONS
from kernelswarm.agents.builtin.cpp_fast_exp import MAX_REL_ERROR
from kernelswarm.agents.builtin.cpp_rewrites import TARGET_FEATURES, host_cpu_flags

# The kernels: float exp in a loop (vectorised), silu as the task computes it, and exp on
# doubles, which must keep libm's exact result.
KERNELS = """\
#include <math.h>
#include <stdint.h>

extern "C" void approx_exp(float* out, const float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        out[i] = expf(x[i]);
    }
}

extern "C" void approx_silu(float* out, const float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        out[i] = x[i] / (1.0f + expf(-x[i]));
    }
}

extern "C" void double_exp(double* out, const double* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        out[i] = exp(x[i]);
    }
}
"""

# Sweeps [-110, 110] (past both ends of the float range of exp) and prints the figures.
MEASURE = """
#include <stdio.h>
#include <vector>

int main() {
    std::vector<float> x;
    for (double v = -110.0; v <= 110.0; v += 1.0 / 4096.0) x.push_back((float)v);
    const float special[] = {0.0f, -0.0f, 88.72f, 88.73f, -87.33f, -103.9f, -104.5f, -1e30f,
                             1e30f, 1.0f / 0.0f, -1.0f / 0.0f, 1e-30f, -1e-30f};
    for (float v : special) x.push_back(v);
    const int64_t n = (int64_t)x.size();
    std::vector<float> e(n), s(n);
    approx_exp(e.data(), x.data(), n);
    approx_silu(s.data(), x.data(), n);
    double max_rel = 0, worst_silu = 0;
    long wrong_special = 0;
    for (int64_t i = 0; i < n; ++i) {
        const double ref = exp((double)x[i]);
        const float libm = expf(x[i]);
        if (isinf(libm)) {
            wrong_special += !isinf(e[i]);
        } else if (ref >= 1.1754943508222875e-38) {
            const double rel = fabs((double)e[i] - ref) / ref;
            if (rel > max_rel) max_rel = rel;
        } else {  // subnormal or zero: within two steps of the smallest subnormal of expf's
            wrong_special += fabs(e[i] - libm) > 2.9e-45f;
        }
        const double silu = (double)x[i] / (1.0 + exp(-(double)x[i]));
        const double excess = fabs((double)s[i] - silu) - (1e-5 + 1e-5 * fabs(silu));
        if (excess > worst_silu) worst_silu = excess;
    }
    const float nan_in = 0.0f / 0.0f;
    float nan_out;
    approx_exp(&nan_out, &nan_in, 1);
    std::vector<double> xd(2001), ed(2001);
    for (int i = 0; i <= 2000; ++i) xd[i] = -700.0 + 0.7 * i + 1e-9 * i;
    double_exp(ed.data(), xd.data(), 2001);
    long double_mismatch = 0;
    for (int i = 0; i <= 2000; ++i) double_mismatch += ed[i] != exp(xd[i]);
    printf("max_rel %.9g\\nwrong_special %ld\\nsilu_excess %.9g\\nnan_kept %d\\n"
           "double_mismatch %ld\\n", max_rel, wrong_special, worst_silu, nan_out != nan_out,
           double_mismatch);
    return 0;
}
"""

VARIANTS = ["plain", "target_isa"]


def _measure(gxx: str, tmp_path: Path, variant: str) -> dict[str, float]:
    library = TRANSFORMATIONS["cpp"]
    result = library["fast_exp"].apply(KERNELS, {})
    assert result is not None
    source = result[0]
    if variant == "target_isa":
        if not set(TARGET_FEATURES) <= host_cpu_flags():
            pytest.skip("this CPU lacks AVX2/FMA")
        source = library["target_isa"].apply(source, {})[0]
    assert "expf(" not in source.replace("ks_fast_expf(", "")
    path = tmp_path / f"measure_{variant}.cpp"
    path.write_text(source + MEASURE)
    exe = tmp_path / f"measure_{variant}"
    built = subprocess.run([gxx, "-O3", "-std=c++17", str(path), "-o", str(exe)],
                           capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    ran = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    return {key: float(value) for key, value in (line.split() for line in ran.stdout.splitlines())}


@pytest.fixture(scope="module", params=VARIANTS)
def figures(request: pytest.FixtureRequest, gxx: str,
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, float]:
    return _measure(gxx, tmp_path_factory.mktemp("fast_exp"), request.param)


def test_relative_error_is_within_the_documented_bound(figures):
    # About 1 ulp of float32 (2^-23 = 1.19e-7 relative at worst).
    assert MAX_REL_ERROR <= 2 * 2.0 ** -23
    assert 0 < figures["max_rel"] <= MAX_REL_ERROR


def test_overflow_underflow_and_nan_behave_like_expf(figures):
    assert figures["wrong_special"] == 0
    assert figures["nan_kept"] == 1


def test_silu_stays_within_the_task_float32_tolerance_even_at_large_arguments(figures):
    assert figures["silu_excess"] <= 0.0


def test_exp_on_doubles_keeps_libm_exact_result(figures):
    assert figures["double_mismatch"] == 0
