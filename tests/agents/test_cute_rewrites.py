"""The built-in agent's moves for CuTe kernels: which apply to which task's kernel, the knobs they
add, that they decline a second time, and that their results build (NVRTC with CUTLASS's
headers; skipped, with the reason, where either is missing). The LLM agent's side of the
language: prompts show the kernel in a ```cute block with CuTe's knob guide, and an answer in one
is read back.
"""

from __future__ import annotations

import pytest

from kernelswarm.agents.builtin.cute_rewrites import CP_ASYNC_KNOB, SWIZZLE_KNOB
from kernelswarm.agents.builtin.transforms import TRANSFORMATIONS, transformations_for
from kernelswarm.agents.llm.answers import parse_kernel
from kernelswarm.agents.llm.context import kernel_section
from kernelswarm.evaluators.languages.cuda import toolkit_include_dirs
from kernelswarm.evaluators.languages.cute import (
    CUTE_DEFINES,
    CUTE_OPTIONS,
    cutlass_include_dir,
    libcudacxx_include_dirs,
)
from kernelswarm.search import SPECS, load_task
from tests.conftest import ROOT
from tests.evaluators.test_cute_language import _missing

TASKS = ROOT / "experiments" / "tasks"
LIB = TRANSFORMATIONS["cute"]


def _start(task: str):
    return load_task(TASKS / task, "cuda").starting_candidate("cute")


# Which moves apply to which task's CuTe kernel, as written.
APPLIES = {"silu_and_mul": {"restrict", "unroll"}, "fused_add_rmsnorm": {"restrict", "unroll"},
           "gemm": {"restrict", "swizzle", "cp_async_l1"}}


@pytest.mark.parametrize("task", sorted(APPLIES))
def test_the_moves_that_apply_to_each_cute_kernel(task):
    start = _start(task)
    applies = {t.name for t in transformations_for("cute") if t.apply(start.source, start.space)}
    assert applies == APPLIES[task]


@pytest.mark.parametrize("name", sorted(LIB))
def test_a_move_applied_once_declines_the_second_time(name):
    start = next(_start(t) for t in APPLIES if name in APPLIES[t])
    source, space = LIB[name].apply(start.source, start.space)
    assert LIB[name].apply(source, space) is None
    assert set(LIB[name].adds_knobs) <= set(space) and set(start.space) <= set(space)


def test_swizzle_puts_every_swizzle_under_one_knob_from_its_written_width_down():
    start = _start("gemm")
    assert start.source.count("Swizzle<3, 3, 3>") == 3  # two layouts, and the header's comment
    source, space = LIB["swizzle"].apply(start.source, start.space)
    assert space[SWIZZLE_KNOB] == (3, 2, 1, 0)
    assert source.count(f"Swizzle<{SWIZZLE_KNOB}, 3, 3>") == 2  # comments are left as written
    assert source.count("Swizzle<3, 3, 3>") == 1
    assert f"#define {SWIZZLE_KNOB} 3" in source


def test_swizzles_of_different_widths_are_left_alone():
    source = ("#include <cute/tensor.hpp>\nusing A = decltype(cute::composition("
              "cute::Swizzle<3, 3, 3>{}, cute::Layout<cute::_8>{}));\nusing B = decltype("
              "cute::composition(cute::Swizzle<2, 3, 3>{}, cute::Layout<cute::_8>{}));\n")
    assert LIB["swizzle"].apply(source, {}) is None


def test_cp_async_l1_switches_the_copy_atom_by_its_knob():
    start = _start("gemm")
    source, space = LIB["cp_async_l1"].apply(start.source, start.space)
    assert space[CP_ASYNC_KNOB] == (0, 1) and LIB["cp_async_l1"].initial_knobs == {CP_ASYNC_KNOB: 1}
    assert "Copy_Atom<KS_CP_ASYNC_ATOM<uint128_t>, T>" in source


@pytest.mark.skipif(_missing() is not None, reason=str(_missing()))
@pytest.mark.slow  # a CuTe MMA kernel: about 35 s of NVRTC on one core
def test_the_gemm_with_both_moves_at_their_other_values_builds_and_uses_them():
    from kernelswarm.evaluators.languages.nvrtc import compile_source

    start = _start("gemm")
    source, space = LIB["swizzle"].apply(start.source, start.space)
    source, space = LIB["cp_async_l1"].apply(source, space)
    defines = [*CUTE_DEFINES, (SWIZZLE_KNOB, "2"), (CP_ASYNC_KNOB, "1")]
    includes = [cutlass_include_dir(), *libcudacxx_include_dirs(), *toolkit_include_dirs()]
    ptx = compile_source(source, "sm_90a", defines, includes, CUTE_OPTIONS).ptx
    assert "cp.async.ca.shared.global" in ptx and "cp.async.cg.shared.global" not in ptx


def test_prompts_show_a_cute_kernel_in_a_cute_block_with_cutes_guide():
    start = _start("silu_and_mul")
    section = kernel_section(start)
    assert "```cute\n" in section and "#include <cute/tensor.hpp>" in section
    assert "CuTe" in SPECS["cute"].knob_guide and "sm_90a" in SPECS["cute"].knob_guide


def test_an_answer_in_a_cute_block_is_read_back():
    start = _start("silu_and_mul")
    faster = start.source.replace("#define BLOCK 256", "#define BLOCK 512")
    answer = (f"```cute\n{faster}```\n```json\n{{\"knobs\": {{\"VEC\": [8, 4]}}, "
              f"\"summary\": \"bigger blocks\"}}\n```")
    kernel = parse_kernel(answer, start)
    assert "#define BLOCK 512" in kernel.source and kernel.knob_space == {"VEC": (8, 4)}
