"""The built-in task suite: semantics of each reference, shapes per device, rooflines, and the
cpp starting kernels judged by the real evaluator (g++, sandbox), with a wrong kernel per task
that the task's shapes or contract must catch."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator
from kernelswarm.experiments.config import BUILTIN_TASKS
from kernelswarm.search import Shape, Status, load_task

SUITE = ("fused_add_rmsnorm", "merge_attn_states_lse", "softmax", "gemm")
DECODE_AND_PREFILL = {1, 16, 128, 1024, 8192}


def _task(name: str, device: str = "cpu"):
    return load_task(BUILTIN_TASKS / name, device)


@pytest.fixture(scope="module")
def evaluators(compile_cache: Path) -> Iterator[dict[str, SandboxEvaluator]]:
    """One evaluator (one sandbox) per task, shared by the tests of this module."""
    settings = EvaluatorSettings(cache_dir=compile_cache, seeds=2, warmup=1, min_repeats=3,
                                 max_repeats=10, timing_budget_s=0.02, flush_cache=False)
    made = {name: SandboxEvaluator(BUILTIN_TASKS / name, "cpp", settings) for name in SUITE}
    yield made
    for evaluator in made.values():
        evaluator.close()


@pytest.mark.parametrize("name", SUITE)
def test_starting_cpp_kernel_passes_the_evaluator(evaluators, name):
    evaluator = evaluators[name]
    evaluation = evaluator.evaluate(evaluator.start_candidate)
    assert evaluation.status is Status.OK, evaluation.message
    assert "held-out" in evaluation.message
    assert len(evaluation.shapes) == len(_task(name).tuning_shapes)
    assert all(s.time_us > 0 and 0 < s.roofline_fraction for s in evaluation.shapes)


# Each wrong kernel falls into the trap its task is built around.
WRONG = {
    # writes the sum back into its input, as the in-place serving op would
    "fused_add_rmsnorm": (Status.REJECTED, "modified its input", """
#include <math.h>
#include <stdint.h>
extern "C" void fused_add_rmsnorm(float* x_out, float* residual_out, const float* x,
        const float* residual, const float* weight, int64_t tokens, int64_t hidden, float eps) {
    float* res = (float*)residual;
    for (int64_t t = 0; t < tokens; ++t) {
        float ss = 0.0f;
        for (int64_t i = 0; i < hidden; ++i) {
            float s = x[t * hidden + i] + res[t * hidden + i];
            res[t * hidden + i] = s; residual_out[t * hidden + i] = s; ss += s * s;
        }
        float inv = 1.0f / sqrtf(ss / hidden + eps);
        for (int64_t i = 0; i < hidden; ++i)
            x_out[t * hidden + i] = residual_out[t * hidden + i] * inv * weight[i];
    }
}"""),
    # no case for two empty parts: exp(-inf - -inf) is NaN
    "merge_attn_states_lse": (Status.INCORRECT, "NaN where the reference is not", """
#include <math.h>
#include <stdint.h>
extern "C" void merge_attn_states_lse(float* out, float* out_lse, const float* o_a,
        const float* lse_a, const float* o_b, const float* lse_b, int64_t tokens, int64_t heads,
        int64_t head_dim) {
    for (int64_t p = 0; p < tokens * heads; ++p) {
        float m = fmaxf(lse_a[p], lse_b[p]);
        float wa = expf(lse_a[p] - m), wb = expf(lse_b[p] - m), total = wa + wb;
        for (int64_t i = 0; i < head_dim; ++i)
            out[p * head_dim + i] = (o_a[p * head_dim + i] * wa + o_b[p * head_dim + i] * wb) / total;
        out_lse[p] = logf(total) + m;
    }
}"""),
    # processes rows in blocks of 8 and drops the tail: right on every tuning width
    "softmax": (Status.INCORRECT, "held-out", """
#include <math.h>
#include <stdint.h>
extern "C" void softmax(float* out, const float* x, int64_t rows, int64_t cols) {
    int64_t body = cols / 8 * 8;
    for (int64_t r = 0; r < rows; ++r) {
        const float* in = x + r * cols; float* o = out + r * cols;
        float m = -INFINITY, sum = 0.0f;
        for (int64_t i = 0; i < body; ++i) m = fmaxf(m, in[i]);
        for (int64_t i = 0; i < body; ++i) { o[i] = expf(in[i] - m); sum += o[i]; }
        for (int64_t i = 0; i < cols; ++i) o[i] = (i < body ? o[i] : 0.0f) / sum;
    }
}"""),
    # unrolls k by 4 with no remainder loop: right while k % 4 == 0
    "gemm": (Status.INCORRECT, "held-out", """
#include <stdint.h>
extern "C" void gemm(float* c, const float* a, const float* b, int64_t m, int64_t n, int64_t k) {
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            float acc = 0.0f;
            for (int64_t l = 0; l + 3 < k; l += 4)
                acc += a[i * k + l] * b[l * n + j] + a[i * k + l + 1] * b[(l + 1) * n + j]
                     + a[i * k + l + 2] * b[(l + 2) * n + j] + a[i * k + l + 3] * b[(l + 3) * n + j];
            c[i * n + j] = acc;
        }
}"""),
}


@pytest.mark.parametrize("name", SUITE)
def test_a_wrong_kernel_is_caught(evaluators, name):
    status, words, source = WRONG[name]
    evaluator = evaluators[name]
    evaluation = evaluator.evaluate(evaluator.start_candidate.derive(source=source))
    assert evaluation.status is status, evaluation.message
    assert words in evaluation.message


@pytest.mark.parametrize("name", SUITE)
def test_shapes_per_device_cover_decode_prefill_and_odd_sizes(name):
    cpu, cuda = _task(name, "cpu"), _task(name, "cuda")
    assert {s["dtype"] for s in cpu.tuning_shapes + cpu.heldout_shapes} == {"float32"}
    token_key = "m" if name == "gemm" else "rows" if name == "softmax" else "tokens"
    # gemm also has the square 4096^3 and 8192^3 matmul benchmarks quote
    square = {4096} if name == "gemm" else set()
    assert {s[token_key] for s in cuda.tuning_shapes} == DECODE_AND_PREFILL | square
    assert "bfloat16" in {s["dtype"] for s in cuda.tuning_shapes}
    for task in (cpu, cuda):
        assert any(v % 2 for s in task.heldout_shapes for k, v in dict(s).items() if k != "dtype")
        assert not set(task.heldout_shapes) & set(task.tuning_shapes)


def test_llama_widths_and_dtypes_on_the_gpu():
    def values(name, key):
        return {s[key] for s in _task(name, "cuda").tuning_shapes}

    assert values("fused_add_rmsnorm", "hidden") == {4096, 5120, 8192}
    assert values("fused_add_rmsnorm", "dtype") == {"bfloat16", "float16"}
    assert values("merge_attn_states_lse", "heads") == {32, 40, 64}
    assert values("merge_attn_states_lse", "head_dim") == {128}
    assert {4096, 5120, 8192} <= values("softmax", "cols")
    assert {11008, 13824, 28672} <= values("gemm", "n") and values("gemm", "dtype") == {"bfloat16"}


@pytest.mark.parametrize("name, shape, expected", [
    # 4 row-sized tensors read or written, plus weight; 5 flops per element
    ("fused_add_rmsnorm", {"tokens": 16, "hidden": 4096, "dtype": "bfloat16"},
     ((4 * 16 * 4096 + 4096) * 2, 5 * 16 * 4096)),
    # two parts and the result (fp32 here), three fp32 lse vectors
    ("merge_attn_states_lse", {"tokens": 2, "heads": 32, "head_dim": 128, "dtype": "float32"},
     (3 * 2 * 32 * 128 * 4 + 3 * 2 * 32 * 4, 3 * 2 * 32 * 128 + 10 * 2 * 32)),
    ("softmax", {"rows": 8, "cols": 32000, "dtype": "float32"}, (2 * 8 * 32000 * 4, 5 * 8 * 32000)),
    ("gemm", {"m": 16, "n": 11008, "k": 4096, "dtype": "bfloat16"},
     ((16 * 4096 + 4096 * 11008 + 16 * 11008) * 2, 2 * 16 * 11008 * 4096)),
])
def test_roofline_matches_a_hand_computed_value(name, shape, expected):
    assert _task(name).roofline(Shape.of(shape)) == tuple(float(v) for v in expected)


def _module(name: str):
    return _task(name).module


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fused_add_rmsnorm_is_the_in_place_op_with_separate_outputs(dtype):
    m = _module("fused_add_rmsnorm")
    shape = {"tokens": 5, "hidden": 64, "dtype": dtype}
    x, residual, weight = m.make_inputs(shape, 1, "cpu")
    x_out, residual_out = m.reference(x, residual, weight)
    total = x.double() + residual.double()
    rms = total.pow(2).mean(-1, keepdim=True).add(m.EPS).sqrt()
    tol = m.TOLERANCES[dtype]
    torch.testing.assert_close(residual_out.double(), total, atol=tol["atol"], rtol=tol["rtol"])
    torch.testing.assert_close(x_out.double(), total / rms * weight.double(), atol=tol["atol"],
                               rtol=tol["rtol"])
    assert x_out.dtype == residual_out.dtype == x.dtype


def test_merged_states_equal_attention_over_all_keys():
    """Attention split over two key sets and merged equals attention over the union."""
    m = _module("merge_attn_states_lse")
    g = torch.Generator().manual_seed(0)
    q = torch.randn(3, 4, 16, generator=g, dtype=torch.float64)
    keys = torch.randn(3, 4, 10, 16, generator=g, dtype=torch.float64)
    values = torch.randn(3, 4, 10, 16, generator=g, dtype=torch.float64)
    scores = torch.einsum("thd,thkd->thk", q, keys)

    def attend(part):
        s = scores[..., part]
        return torch.einsum("thk,thkd->thd", s.softmax(-1), values[..., part, :]), s.logsumexp(-1)

    whole_out, whole_lse = attend(slice(0, 10))
    (o_a, lse_a), (o_b, lse_b) = attend(slice(0, 4)), attend(slice(4, 10))
    out, lse = m.reference(o_a.float(), lse_a.float(), o_b.float(), lse_b.float())
    torch.testing.assert_close(out.double(), whole_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse.double(), whole_lse, atol=1e-5, rtol=1e-5)


def test_merge_handles_parts_that_attended_to_no_keys():
    m = _module("merge_attn_states_lse")
    o_a, lse_a, o_b, lse_b = m.make_inputs({"tokens": 4, "heads": 3, "head_dim": 8,
                                            "dtype": "float32"}, 0, "cpu")
    out, lse = m.reference(o_a, lse_a, o_b, lse_b)
    assert math.isinf(lse_a[0, 0]) and not math.isinf(lse_b[0, 0])
    torch.testing.assert_close(out[0, 0], o_b[0, 0])  # the empty part contributes nothing
    assert lse[0, 0] == lse_b[0, 0]
    assert lse[-1, -1] == -math.inf and bool((out[-1, -1] == 0).all())  # both empty
    assert not out.isnan().any()


def test_softmax_rows_are_distributions_even_for_large_logits():
    m = _module("softmax")
    (x,) = m.make_inputs({"rows": 3, "cols": 1000, "dtype": "float32"}, 0, "cpu")
    (out,) = m.reference(x + 100.0)  # exp(100+) overflows float32 without the max subtraction
    torch.testing.assert_close(out.sum(-1), torch.ones(3))
    torch.testing.assert_close(out.double(), torch.softmax(x.double(), -1), atol=1e-6, rtol=1e-4)


def test_gemm_is_a_matrix_product_with_unit_scale_outputs():
    m = _module("gemm")
    a, b = m.make_inputs({"m": 5, "n": 7, "k": 4096, "dtype": "float32"}, 0, "cpu")
    (c,) = m.reference(a, b)
    torch.testing.assert_close(c.double(), a.double() @ b.double(), atol=1e-4, rtol=1e-4)
    assert 0.3 < float(c.std()) < 3.0  # B scaled by 1/sqrt(k): tolerances mean the same at any k
