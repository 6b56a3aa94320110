"""The transformations on sources other than the task's: what they touch, what they leave alone,
and the effect g++ reports for each (``-fopt-info``), on small kernels written for the purpose."""

from __future__ import annotations

import pytest

from kernelswarm.agents import TRANSFORMATIONS
from kernelswarm.agents.builtin.cpp_rewrites import TARGET_FEATURES, host_cpu_flags

LIB = TRANSFORMATIONS["cpp"]

SCALE = """\
#include <stdint.h>

extern "C" void scale(float* out, const float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        out[i] = 2.0f * x[i];
    }
}
"""


def _apply(name: str, source: str, space: dict | None = None) -> str:
    result = LIB[name].apply(source, space or {})
    assert result is not None, f"{name} does not apply"
    return result[0]


# --- restrict ----------------------------------------------------------------------------------

def test_restrict_marks_every_pointer_parameter_and_nothing_else():
    source = ('#include <stdint.h>\n'
              '// extern "C" void in_a_comment(float* a);\n'
              'static void helper(float* p) { *p = 0; }\n'
              'extern "C" {\n'
              'void f(float *out, const float * const x, int64_t n, float& r) { helper(out); }\n'
              'void g(float** rows, void (*callback)(float*), float* __restrict__ done);\n'
              '}\n'
              'extern "C" void h(double*y) { y[0] = 1; }\n')
    rewritten = _apply("restrict", source)
    assert "float * __restrict__ out" in rewritten
    assert "const float * __restrict__ const x" in rewritten
    assert "float** __restrict__ rows" in rewritten
    assert "void (*callback)(float*)" in rewritten  # a function pointer is left alone
    assert "double* __restrict__ y" in rewritten
    assert "helper(float* p)" in rewritten  # not extern "C"
    assert "in_a_comment(float* a)" in rewritten
    assert rewritten.count("__restrict__") == 5


def test_restrict_does_not_apply_without_pointer_parameters():
    assert LIB["restrict"].apply('extern "C" void f(int n, float x) {}\n', {}) is None
    assert LIB["restrict"].apply("void f(float* x) {}\n", {}) is None


# --- fast_exp ----------------------------------------------------------------------------------

def test_fast_exp_replaces_calls_but_not_comments_strings_members_or_other_names():
    source = ('#include <math.h>\n'
              'struct S { float exp(float v) const { return v; } };\n'
              'static float myexp(float v) { return v; }\n'
              'extern "C" void f(float* o, const float* x) {\n'
              '    const char* note = "expf(1)";  // expf( in a comment\n'
              '    S s;\n'
              '    o[0] = expf(x[0]) + std::exp(x[1]) + ::expf(x[2]) + s.exp(x[3]) + myexp(x[4]);\n'
              '    (void)note;\n'
              '}\n')
    rewritten = _apply("fast_exp", source)
    body = rewritten[rewritten.index('extern "C"'):]
    assert "ks_fast_expf(x[0]) + ks_fast_exp(x[1]) + ks_fast_expf(x[2])" in body
    assert "s.exp(x[3])" in body and "myexp(x[4])" in body
    assert '"expf(1)"' in body and "// expf( in a comment" in body
    assert rewritten.count("static inline float ks_fast_expf(float x)") == 1


def test_fast_exp_defines_its_helper_once_when_new_calls_appear_later(compile_cpp):
    once = _apply("fast_exp", SCALE.replace("2.0f * x[i]", "expf(x[i])"))
    later = once + 'extern "C" void g(float* o, const float* x) { o[0] = expf(x[0]); }\n'
    twice = _apply("fast_exp", later)
    assert twice.count("static inline float ks_fast_expf(float x)") == 1
    assert "o[0] = ks_fast_expf(x[0]);" in twice
    assert compile_cpp(twice).returncode == 0


def test_fast_exp_does_not_apply_without_exp_calls():
    assert LIB["fast_exp"].apply(SCALE, {}) is None


def test_fast_exp_lets_the_silu_loop_vectorise(start, compile_cpp):
    before = compile_cpp(start.source, extra=("-fopt-info-vec-optimized",))
    after = compile_cpp(_apply("fast_exp", start.source), extra=("-fopt-info-vec-optimized",))
    assert "loop vectorized" not in before.stderr
    assert "loop vectorized" in after.stderr


# --- simd ---------------------------------------------------------------------------------------

def test_simd_annotates_innermost_loops_only_and_skips_recurrences():
    source = ('extern "C" void f(float* o, const float* x, long n, long m) {\n'
              '    for (long t = 0; t < m; ++t) {\n'
              '        for (long i = 0; i < n; ++i) o[t * n + i] = x[i];\n'
              '        for (long i = 1; i < n; ++i) { o[i] = o[i - 1] + x[i]; }\n'
              '    }\n'
              '    if (n > 0)\n'
              '        for (long i = 0; i < n; ++i) o[i] += 1.0f;\n'
              '}\n')
    rewritten = _apply("simd", source)
    lines = rewritten.splitlines()
    assert rewritten.count("#pragma GCC ivdep") == 1
    assert lines[lines.index("        #pragma GCC ivdep") + 1].lstrip().startswith(
        "for (long i = 0; i < n; ++i) o[t * n + i]")


def test_simd_vectorises_without_run_time_alias_checks(compile_cpp):
    before = compile_cpp(SCALE, extra=("-fopt-info-vec-optimized",))
    after = compile_cpp(_apply("simd", SCALE), extra=("-fopt-info-vec-optimized",))
    assert "versioned for vectorization because of possible aliasing" in before.stderr
    assert "loop vectorized" in after.stderr
    assert "possible aliasing" not in after.stderr


# --- unroll -------------------------------------------------------------------------------------

def test_unroll_factor_is_a_knob_that_g_plus_plus_obeys(compile_cpp):
    result = LIB["unroll"].apply(SCALE, {"BLOCK": (64, 128)})
    assert result is not None
    source, space = result
    assert space == {"BLOCK": (64, 128), "KS_UNROLL": (1, 2, 4, 8)}
    reports = {f: compile_cpp(source, {"KS_UNROLL": f}, extra=("-fopt-info-loop-optimized",))
               for f in (1, 4, 8)}
    assert all(r.returncode == 0 for r in reports.values())
    assert "unrolled" not in reports[1].stderr  # factor 1 leaves the loop to g++ as before
    assert "loop unrolled 3 times" in reports[4].stderr
    assert "loop unrolled 7 times" in reports[8].stderr


def test_unroll_declines_where_an_unroll_already_exists():
    assert LIB["unroll"].apply(SCALE, {"KS_UNROLL": (1, 2)}) is None
    pragma = SCALE.replace("    for (", "    #pragma GCC unroll 4\n    for (")
    assert LIB["unroll"].apply(pragma, {}) is None


# --- target_isa ---------------------------------------------------------------------------------

def test_target_isa_gives_the_vectoriser_32_byte_lanes(compile_cpp):
    if not set(TARGET_FEATURES) <= host_cpu_flags():
        assert LIB["target_isa"].apply(SCALE, {}) is None
        pytest.skip("this CPU lacks AVX2/FMA, so target_isa (correctly) does not apply")
    before = compile_cpp(SCALE, extra=("-fopt-info-vec-optimized",))
    after = compile_cpp(_apply("target_isa", SCALE), extra=("-fopt-info-vec-optimized",))
    assert "32 byte vectors" not in before.stderr
    assert "32 byte vectors" in after.stderr


def test_target_isa_declines_where_a_target_is_already_chosen():
    source = '#pragma GCC target("sse4.2")\n' + SCALE
    assert LIB["target_isa"].apply(source, {}) is None


# --- sources the scanner will not guess about ---------------------------------------------------

@pytest.mark.parametrize("name", sorted(LIB))
def test_unreadable_or_conditional_sources_are_declined_not_mangled(name):
    raw_string = SCALE.replace("2.0f * x[i]", 'expf(x[i]) + sizeof(R"(a)")')
    assert LIB[name].apply(raw_string, {}) is None
    unterminated = SCALE + "/* no end\n"
    assert LIB[name].apply(unterminated, {}) is None


@pytest.mark.parametrize("name", ["fast_exp", "unroll", "target_isa"])
def test_file_level_code_is_not_inserted_inside_an_open_conditional(name):
    source = "#ifdef FAST\n" + SCALE.replace("2.0f * x[i]", "expf(x[i])") + "#endif\n"
    assert LIB[name].apply(source, {}) is None
