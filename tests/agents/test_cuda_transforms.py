"""The cuda transformations on the suite's starting kernels: where each applies and where it
declines, that each result builds with NVRTC alone and composed (at its first knob values and at
the largest), that each is idempotent, and the launchers' geometry knobs. No GPU needed: NVRTC
builds for ``sm_90`` on the CPU."""

from __future__ import annotations

import importlib.util
import itertools

import pytest

from kernelswarm.agents import TRANSFORMATIONS, transformations_for
from kernelswarm.agents.builtin.cuda_structures import Structure
from kernelswarm.evaluators.languages.cuda_device import DeviceFigures
from kernelswarm.search import STAGES, Candidate, load_task
from tests.conftest import ROOT

TASKS = ROOT / "experiments" / "tasks"
LIB = TRANSFORMATIONS["cuda"]
# Which transformation applies to which suite kernel (the others must decline).
APPLIES = {
    "silu_and_mul": {"vectorize", "split_rows", "restrict", "unroll", "fast_math", "stream"},
    "fused_add_rmsnorm": {"vectorize", "restrict", "unroll", "fast_math", "warp_rows"},
    "merge_attn_states_lse": {"vectorize", "rows_per_block", "restrict", "unroll", "fast_math"},
    "softmax": {"vectorize", "restrict", "unroll", "fast_math"},
    "gemm": {"restrict"},
}
needs_nvrtc = pytest.mark.skipif(
    importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.core") is None,
    reason="NVRTC through cuda.core is not installed")


def start_of(task: str) -> Candidate:
    return load_task(TASKS / task, "cuda").starting_candidate("cuda")


def rewrite(candidate: Candidate, name: str) -> Candidate:
    """``candidate`` rewritten by ``name``, new knobs at the transformation's initial values."""
    transformation = LIB[name]
    result = transformation.apply(candidate.source, candidate.space)
    assert result is not None, f"{name} does not apply"
    source, space = result
    fresh = {k: v for k, v in transformation.initial_knobs.items() if k not in candidate.space}
    return candidate.derive(source=source, knob_space=space, knobs=fresh)


def compose(task: str, names: list[str]) -> Candidate:
    candidate = start_of(task)
    for name in names:
        candidate = rewrite(candidate, name)
    return candidate


def largest(candidate: Candidate) -> Candidate:
    return candidate.derive(knobs={k: max(v) for k, v in candidate.space.items()})


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """``build(task, candidate)``: the evaluator's NVRTC build for sm_90; asserts it succeeded."""
    from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator

    cache = tmp_path_factory.mktemp("cuda-builds")
    evaluators: dict[str, SandboxEvaluator] = {}

    def run(task: str, candidate: Candidate) -> None:
        if task not in evaluators:
            evaluators[task] = SandboxEvaluator(TASKS / task, "cuda", EvaluatorSettings(
                device="cuda", cuda_arch="sm_90", cache_dir=cache))
        result = evaluators[task].compile(candidate)
        assert result.ok, f"{task} {candidate.knob_values}:\n{result.log[-2000:]}"

    yield run
    for evaluator in evaluators.values():
        evaluator.close()


def test_every_cuda_transformation_states_its_stage_and_knobs():
    for transformation in transformations_for("cuda"):
        assert transformation.stage in STAGES
        assert transformation.description and "\n" not in transformation.description
        assert set(transformation.initial_knobs) == set(transformation.adds_knobs)
    assert {t.name for t in transformations_for("cuda")} == set().union(*APPLIES.values())


@pytest.mark.parametrize("task", sorted(APPLIES))
def test_each_transformation_applies_exactly_where_it_should(task):
    start = start_of(task)
    applies = {t.name for t in transformations_for("cuda") if t.apply(start.source, start.space)}
    assert applies == APPLIES[task]


CASES = sorted((task, name) for task, names in APPLIES.items() for name in names)


@needs_nvrtc
@pytest.mark.parametrize("task, name", CASES)
def test_each_transformation_alone_builds_at_its_first_and_largest_knobs(task, name, build):
    child = compose(task, [name])
    assert child.source != start_of(task).source
    assert LIB[name].apply(child.source, child.space) is None  # idempotent
    for knob in LIB[name].adds_knobs if not isinstance(LIB[name], Structure) else ():
        assert child.space[knob][0] == 1 or knob not in child.space  # first value: as before
    build(task, child)
    if child.space != start_of(task).space:
        build(task, largest(child))


@needs_nvrtc
@pytest.mark.parametrize("task", ["silu_and_mul", "fused_add_rmsnorm", "merge_attn_states_lse",
                                  "softmax"])
def test_all_transformations_compose_in_either_order_and_build(task, build):
    names = [t.name for t in transformations_for("cuda") if t.name in APPLIES[task]
             and not isinstance(t, Structure)]  # a structure replaces the kernel: tested apart
    for order in (names, names[::-1]):
        composed = compose(task, order)
        for name in names:
            assert LIB[name].apply(composed.source, composed.space) is None
        build(task, composed)
        build(task, largest(composed))


def test_pairs_compose_without_error():
    for task, names in APPLIES.items():
        micro = sorted(n for n in names if not isinstance(LIB[n], Structure))
        for first, second in itertools.permutations(micro, 2):
            composed = compose(task, [first, second])
            assert LIB[first].apply(composed.source, composed.space) is None


# --- what each rewrite does and declines, on small kernels -------------------------------------

KERNEL = """\
extern "C" __global__ void scale(float* out, const float* x, long long n) {
    const long long row = blockIdx.x;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) {
        BODY
    }
}
"""


def _kernel(body: str) -> str:
    return KERNEL.replace("BODY", body)


def test_vectorize_keeps_the_original_loop_as_the_fallback_and_vec_1_as_before():
    source = _kernel("out[row * n + i] = 2.0f * x[row * n + i];")
    rewritten, space = LIB["vectorize"].apply(source, {})
    assert space == {"VEC": (1, 2, 4, 8)}
    assert "for (long long i = threadIdx.x; i < n; i += blockDim.x)" in rewritten
    assert "#if VEC > 1" in rewritten and "(n) % VEC == 0" in rewritten
    assert "ks_aligned<VEC>(out + (row * n))" in rewritten
    assert "ks_store<VEC>(out + (row * n) + ks_v0_base" in rewritten
    assert "decltype(ks_load<VEC>(out)) ks_v0_0" in rewritten  # written only: not loaded


@pytest.mark.parametrize("body", [
    "out[2 * i] = x[i];",  # not X + i
    "out[i] = x[i + 1 - 1] + (float)i;",  # i used as a value
    "if (x[i] > 0.0f) out[i] = x[i];",  # control flow
    "out[i] = x[i]; __syncthreads();",  # synchronisation
    "out[row + i] = x[i]; row += 1;",  # the offset changes in the body
    "float t[4]; t[i & 3] = x[i]; out[i] = t[0];",  # a local array
])
def test_vectorize_declines_bodies_it_cannot_read(body):
    assert LIB["vectorize"].apply(_kernel(body), {}) is None


def test_a_callee_that_reads_its_pointer_makes_the_array_loaded_and_stored():
    source = ("__device__ void bump(float* p, float v) { *p = *p + v; }\n"
              + _kernel("bump(out + row * n + i, x[i]);"))
    rewritten = LIB["vectorize"].apply(source, {})[0]
    assert "    auto ks_v0_1 = ks_load<VEC>(out + (row * n) + ks_v0_base)" in rewritten
    assert "bump(&ks_v0_1.v[ks_j], ks_v0_0.v[ks_j])" in rewritten
    assert "ks_store<VEC>(out + (row * n) + ks_v0_base, ks_v0_1)" in rewritten


def test_split_rows_declines_where_threads_cooperate_or_threadidx_is_used_elsewhere():
    assert LIB["split_rows"].apply(_kernel("out[i] = x[i];"), {}) is not None
    assert LIB["split_rows"].apply(_kernel("out[i] = x[i]; __syncthreads();"), {}) is None
    assert LIB["split_rows"].apply(
        _kernel("out[i] = x[i];").replace("const long long row", "if (threadIdx.x == 0) out[0] = 1;"
                                          " const long long row"), {}) is None


def test_rows_per_block_needs_the_row_count_parameter():
    assert LIB["rows_per_block"].apply(_kernel("out[i] = x[i];"), {}) is None
    with_rows = _kernel("out[row * n + i] = x[i];").replace("long long n)", "long long n, long long rows)")
    rewritten = LIB["rows_per_block"].apply(with_rows, {})[0]
    assert "if (row >= rows) return;" in rewritten and "i += blockDim.x" in rewritten


def test_fast_math_rewrites_only_provable_float_divisions():
    source = _kernel("out[i] = x[i] / 3.0f + x[i] / x[i] + expf(x[i]) + (float)(n / 2);")
    rewritten = LIB["fast_math"].apply(source, {})[0]
    assert "__fdividef(x[i], 3.0f)" in rewritten and "__expf(x[i])" in rewritten
    assert "x[i] / x[i]" in rewritten and "n / 2" in rewritten
    assert LIB["fast_math"].apply(_kernel("out[i] = x[i] / 3.0;"), {}) is None  # a double


def test_restrict_adds_const_where_a_pointer_is_only_read():
    source = _kernel("out[i] = x[i];").replace("const float* x", "float* x")
    rewritten = LIB["restrict"].apply(source, {})[0]
    assert "const float* __restrict__ x" in rewritten and "float* __restrict__ out" in rewritten
    assert "const float* __restrict__ out" not in rewritten


# --- launchers: geometry knobs ------------------------------------------------------------------

class _Launch:
    """A stand-in for the compiled entry point that records launches."""

    def __init__(self, knobs):
        self.knobs, self.calls = knobs, []
        self.registers = 32
        self.device = DeviceFigures(ordinal=0, sm_count=132, l2_bytes=50 << 20,  # an H100's
                                    max_threads_per_sm=2048, shared_bytes_per_sm=228 << 10,
                                    registers_per_sm=65536, warp_size=32)

    def kernel(self, name):
        return self

    def __call__(self, grid, block, *args):
        self.calls.append((grid, block, tuple(a for a in args[-2:] if isinstance(a, int))))


def _launch(task: str, shape: dict, knobs: dict):
    module = load_task(TASKS / task, "cuda").module
    fn = _Launch(knobs)
    module.launch_cuda(fn, module.make_inputs(shape, 0, "cpu"), module.make_outputs(shape, "cpu"),
                       shape)
    return fn.calls[0]


def test_silu_launcher_without_split_launches_as_the_start_and_with_split_fills_the_gpu():
    small = {"tokens": 1, "d": 11008, "dtype": "bfloat16"}
    assert _launch("silu_and_mul", small, {"BLOCK": 256})[:2] == (1, 256)
    assert _launch("silu_and_mul", small, {"BLOCK": 256, "SPLIT": 64, "VEC": 8})[:2] == ((1, 6), 256)
    many = {"tokens": 1024, "d": 256, "dtype": "bfloat16"}
    assert _launch("silu_and_mul", many, {"BLOCK": 256, "SPLIT": 64, "VEC": 1})[:2] == (1024, 256)


def test_merge_launcher_without_rows_launches_as_the_start_and_with_rows_packs_pairs():
    shape = {"tokens": 3, "heads": 5, "head_dim": 128, "dtype": "bfloat16"}
    assert _launch("merge_attn_states_lse", shape, {"BLOCK": 128}) == (15, 128, (128, 15))
    assert _launch("merge_attn_states_lse", shape, {"BLOCK": 128, "ROWS": 8, "VEC": 8}) == (
        2, (16, 8), (128, 15))
