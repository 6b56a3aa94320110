"""Reading C-like source: functions found by brace depth (``extern "C"`` ones for C++, defined
ones for CUDA) past comments, literals and bodies, and the lines above loops."""

from __future__ import annotations

import pytest

from kernelswarm.agents.builtin.clike import (
    SourceError,
    declarations,
    extern_c_functions,
    for_loops,
    mask,
)
from kernelswarm.agents.builtin.cuda_source import device_functions, strided_loops

CPP = r'''
// extern "C" void in_a_comment(int x);
static const char* text = "extern \"C\" void in_a_string(int y) {";
static int helper(int a) { return a * 2; }
extern "C" void scale(float* out, const float* in, int n) {
    const char* brace = "}";  /* a } in a comment */
    for (int i = 0; i < n; ++i) out[i] = helper(in[i]);
}
extern "C" {
void add(float* out, const float* a, const float* b, int n);
int count(void) { if (1) { return 0; } return 1; }
}
'''

CUDA = r'''
#define SQUARE(x) ((x) * (x))
__device__ float twice(float v) { return 2.0f * v; }
__global__ void declared_only(float* out);
extern "C" __global__ void __launch_bounds__(256) silu(float* out, const float* in, int n) {
    const char* text = "{ not a brace";
    // }
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        out[i] = twice(in[i]);
    }
}
template <int N> __device__ void unrolled(float* out) { out[0] = N; }
'''


def test_extern_c_functions_are_read_past_comments_literals_and_bodies() -> None:
    functions = extern_c_functions(CPP)
    assert [f.name for f in functions] == ["scale", "add", "count"]
    scale = functions[0]
    assert [" ".join(p.text.split()) for p in scale.parameters] == [
        "float* out", "const float* in", "int n"]
    assert CPP[scale.parameters[2].start:scale.parameters[2].end] == " int n"


def test_device_functions_are_the_definitions_with_their_bodies() -> None:
    functions = device_functions(CUDA)
    assert [f.name for f in functions] == ["twice", "silu", "unrolled"]
    silu = functions[1]
    assert silu.is_kernel and not functions[0].is_kernel
    assert CUDA[silu.body_open] == "{" and CUDA[silu.body_close] == "}"
    assert CUDA[silu.body_close + 1:].lstrip().startswith("template")
    assert silu.pointer_parameters() == {"out": False, "in": True}


def test_one_scanner_serves_both_readings() -> None:
    masked = mask(CUDA)
    found = list(declarations(masked, frozenset({"__launch_bounds__"})))
    assert [(d.name, d.body is not None) for d in found] == [
        ("twice", True), ("declared_only", False), ("silu", True), ("unrolled", True)]
    assert [d.name for d in found if d.body is not None] == [f.name for f in device_functions(CUDA)]
    # Without the attribute among the names that are not functions, it reads as a declaration.
    assert [d.name for d in declarations(masked, frozenset())][2] == "__launch_bounds__"


def test_unbalanced_braces_are_refused_not_guessed() -> None:
    with pytest.raises(SourceError):
        device_functions("__global__ void k(float* out) { if (1) { out[0] = 1; }\n")
    with pytest.raises(SourceError):
        extern_c_functions('extern "C" { void f(int n);\n')


def test_loops_know_whether_a_line_may_go_above_them() -> None:
    source = ("void f(float* out, int n) {\n"
              "    #pragma unroll 4\n"
              "    for (int i = 0; i < n; ++i) out[i] = 0;\n"
              "    int k = 0; for (int j = 0; j < n; ++j) out[j] += k;\n"
              "}\n")
    first, second = for_loops(source)
    assert (first.variable, first.annotations, first.annotatable) == (
        "i", ("#pragma unroll 4",), True)
    assert (second.variable, second.annotatable) == ("j", False)
    (strided,) = strided_loops(CUDA)
    assert (strided.variable, strided.stride, strided.statement_start) == (
        "i", "blockDim.x", True)
    assert CUDA[strided.line_start:strided.keyword] == "    "
