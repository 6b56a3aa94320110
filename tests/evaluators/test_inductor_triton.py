"""Triton starts from Inductor's Triton code: the conversion of captured output code into a
kernel module under a task's contract, judged on this CPU under Triton's interpreter."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator
from kernelswarm.evaluators.inductor.inductor_code import (
    ArgKind,
    Argument,
    GenerationError,
    LibraryCall,
    ShapeCode,
    parse_output_code,
)
from kernelswarm.evaluators.inductor.inductor_start import generate_start, probe_launcher
from kernelswarm.evaluators.inductor.inductor_triton import triton_start
from kernelswarm.evaluators.languages.screen import screen
from kernelswarm.evaluators.languages.triton import TritonLanguage
from kernelswarm.search import Shape, Status, load_task
from kernelswarm.search.dispatch import read_shape_knobs

from . import inductor_texts
from .conftest import quick_settings


def _interpret(script: str, kernel: Path, *arguments: str) -> subprocess.CompletedProcess:
    """``script`` run on the generated ``kernel`` under Triton's interpreter, in a process of its
    own (the interpreter is chosen when triton is first imported)."""
    return subprocess.run([sys.executable, "-c", script, str(kernel), *arguments],
                          env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True,
                          text=True, timeout=300)


def _silu_shapes(task) -> list[ShapeCode]:
    """Each cpu shape of the task with the output code Inductor writes for it on CUDA."""
    shapes = []
    for shape in (*task.tuning_shapes, *task.heldout_shapes):
        inputs = task.module.make_inputs(dict(shape), 0, "cpu")
        outputs = task.module.make_outputs(dict(shape), "cpu")
        code = parse_output_code(inductor_texts.silu_and_mul(shape["tokens"], shape["d"]))
        shapes.append(ShapeCode(
            shape.label, code, (0,), probe_launcher(task, "triton", shape, inputs, outputs),
            ("float32",), tuple((tuple(t.shape), "float32") for t in outputs),
            tuple(tuple(t.shape) for t in inputs)))
    return shapes


def test_captured_silu_code_becomes_a_kernel_the_evaluator_passes(
        tiny_silu_task: Path, tmp_path: Path, compile_cache: Path) -> None:
    silu_task_copy = tmp_path / "silu_tiny"
    shutil.copytree(tiny_silu_task, silu_task_copy)
    task = load_task(silu_task_copy, "cpu")
    tuned = {s.label for s in task.tuning_shapes}
    source, knobs = triton_start("silu_and_mul", _silu_shapes(task), tuned)
    assert "triton_helpers" not in source and "triton_heuristics" not in source
    # each tuning shape's version has knobs of its own, 0 (as compiled) first; the held-out
    # shapes' versions have none
    indices = range(len(task.tuning_shapes))
    assert knobs == {**{f"XBLOCK_S{i}": (0, 1024, 128, 256, 512, 2048) for i in indices},
                     **{f"NUM_WARPS_S{i}": (0, 4, 1, 2, 8) for i in indices}}
    assert read_shape_knobs(source) == {s.label: f"_S{i}"
                                        for i, s in enumerate(task.tuning_shapes)}
    (silu_task_copy / "silu_and_mul_triton.py").write_text(source)
    task = load_task(silu_task_copy, "cpu")
    # Triton's interpreter is slow on a loaded machine: a generous limit, not a timing test
    with SandboxEvaluator(silu_task_copy, "triton",
                          quick_settings(compile_cache, run_timeout_s=120.0)) as evaluator:
        evaluation = evaluator.evaluate(task.starting_candidate("triton"))
    assert evaluation.status is Status.OK, evaluation.message
    assert "2 held-out shapes" in evaluation.message


_RUN_SOFTMAX = """
import sys, importlib.util, torch
spec = importlib.util.spec_from_file_location("generated", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
x = torch.randn(5, 300)
out = torch.full((300, 5), float("nan"))
module.softmax_t(out, x, 5, 300, PER_XBLOCK=2)
torch.testing.assert_close(out, torch.softmax(x, -1).t())
out = torch.full((300, 5), float("nan"))
module.softmax_t(out, x, 5, 300)  # every knob at 0: launched as compile chose
torch.testing.assert_close(out, torch.softmax(x, -1).t())
try:
    module.softmax_t(out, x, 6, 300)
except ValueError as exc:
    print("refused:", exc)
"""


def test_a_returned_view_is_copied_and_reductions_use_inductors_helpers(tmp_path: Path) -> None:
    arguments = (Argument(ArgKind.OUTPUT, 0), Argument(ArgKind.INPUT, 0),
                 Argument(ArgKind.SCALAR, value=(5,)), Argument(ArgKind.SCALAR, value=(300,)))
    # the settings Inductor's autotuning kept for the kernel on this shape
    chosen = (("triton_per_fused__softmax_0",
               (("XBLOCK", 4), ("num_stages", 1), ("num_warps", 2))),)
    shape = ShapeCode("rows=5,cols=300", parse_output_code(inductor_texts.softmax_transposed(
        5, 300)), (0,), arguments, ("float32",), (((300, 5), "float32"),), ((5, 300),), chosen)
    source, knobs = triton_start("softmax_t", [shape])
    assert set(knobs) == {"PER_XBLOCK", "NUM_WARPS"}  # one version: no suffix
    assert knobs["PER_XBLOCK"][0] == 0 and knobs["NUM_WARPS"][0] == 0
    # at 0 each knob launches the kernel as compile did on this shape
    assert "XBLOCK=(PER_XBLOCK or 4)" in source
    assert "num_warps=(NUM_WARPS or 2), num_stages=1)" in source
    assert "R0_BLOCK: tl.constexpr = 512" in source and "copy_view[" in source
    assert screen(source, TritonLanguage.screen_rules) is None  # what a kernel module may use
    (tmp_path / "kernel.py").write_text(source)
    # a process of its own: Triton's interpreter is chosen when triton is first imported
    done = _interpret(_RUN_SOFTMAX, tmp_path / "kernel.py")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused: softmax_t: no version for this call" in done.stdout


_RUN_REDUCTION = """
import sys, importlib.util, torch
import triton.language as tl
from triton.language.extra import libdevice
# Triton's interpreter runs no libdevice function: the two these kernels call go to tl.math's
# (on a GPU they are libdevice's own)
libdevice.exp = lambda x, **kw: tl.math.exp(x)
libdevice.rsqrt = lambda x, **kw: tl.math.rsqrt(x)
spec = importlib.util.spec_from_file_location("generated", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
x = torch.randn(5, 3000) * 3 + 1
out = torch.full((5, 3000), float("nan"))
if sys.argv[2] == "softmax":
    module.start(out, x, 5, 3000, RED_XBLOCK=2, RED_RBLOCK=1024)
    torch.testing.assert_close(out, torch.softmax(x, -1))
else:
    module.start(out, x, 5, 3000, RED_XBLOCK=4, RED_RBLOCK=512)
    torch.testing.assert_close(out, torch.nn.functional.layer_norm(x, (3000,)), atol=1e-4,
                               rtol=1e-4)
print("matches", sys.argv[2])
"""


@pytest.mark.parametrize(("kind", "text", "helpers"), [
    ("softmax", inductor_texts.online_softmax,
     {"online_softmax_combine", "online_softmax_reduce", "max2", "maximum", "exp"}),
    ("layer_norm", inductor_texts.welford_layer_norm,
     {"welford_reduce", "welford", "welford_combine"}),
])
def test_inductors_runtime_helpers_come_from_the_installed_torch(tmp_path: Path, kind, text,
                                                                 helpers) -> None:
    # Looped reductions as Inductor writes them for softmax (online softmax) and layer_norm
    # (Welford): the helpers they call, and those the helpers call, are copied from this
    # torch's triton_helpers; the 3000-column rows take several chunks, the last one partial.
    arguments = (Argument(ArgKind.OUTPUT, 0), Argument(ArgKind.INPUT, 0),
                 Argument(ArgKind.SCALAR, value=(5,)), Argument(ArgKind.SCALAR, value=(3000,)))
    shape = ShapeCode("rows=5,cols=3000", parse_output_code(text(5, 3000)), (0,), arguments,
                      ("float32",), (((5, 3000), "float32"),), ((5, 3000),))
    source, knobs = triton_start("start", [shape])
    assert set(knobs) == {"RED_XBLOCK", "RED_RBLOCK", "NUM_WARPS"}
    assert "triton_helpers" not in source
    for helper in helpers:
        assert f"def helper_{helper}(" in source, helper
    assert screen(source, TritonLanguage.screen_rules) is None
    (tmp_path / "kernel.py").write_text(source)
    done = _interpret(_RUN_REDUCTION, tmp_path / "kernel.py", kind)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"matches {kind}" in done.stdout


def test_a_helper_the_module_cannot_copy_is_refused_by_name() -> None:
    from kernelswarm.evaluators.inductor.inductor_triton import inductor_helpers

    with pytest.raises(GenerationError, match=r"triton_helpers\.sort_with_index, which needs "
                                              r"'_log2' of Inductor's runtime"):
        inductor_helpers({"sort_with_index"}, "triton_per_fused_sort_0")
    with pytest.raises(GenerationError, match=r"triton_helpers\.no_such_helper, which this "
                                              r"torch's .* does not define"):
        inductor_helpers({"no_such_helper"})
    with pytest.raises(GenerationError, match=r"if_mask, which is not a plain @triton\.jit"):
        inductor_helpers({"if_mask"})


def test_a_block_size_the_kernel_sets_itself_is_launched_as_set_and_not_tuned() -> None:
    text = inductor_texts.softmax_transposed(5, 300).replace(
        "    R0_BLOCK: tl.constexpr = 512", "    XBLOCK: tl.constexpr = 1\n    R0_BLOCK: tl.constexpr = 512")
    arguments = (Argument(ArgKind.OUTPUT, 0), Argument(ArgKind.INPUT, 0))
    shape = ShapeCode("rows=5,cols=300", parse_output_code(text), (0,), arguments, ("float32",),
                      (((300, 5), "float32"),), ((5, 300),))
    source, knobs = triton_start("softmax_t", [shape])
    assert set(knobs) == {"NUM_WARPS"}
    assert "[(triton.cdiv(5, 1),)](a1, buf2, 5, 300, XBLOCK=1, num_warps=(NUM_WARPS or 4))" \
        in source


_FALLBACK = """
def call(args):
    arg0_1, = args
    args.clear()
    buf0 = torch.ops.aten.sort.default(arg0_1, -1)
    return (buf0, )
"""
_SYMBOLIC = """
def call(args):
    arg0_1, = args
    s0 = arg0_1.size(0)
    buf0 = empty_strided_cpu((s0, 4096), (4096, 1), torch.float32)
    return (buf0, )
"""


@pytest.mark.parametrize(("text", "reason"), [
    (inductor_texts.matmul(16), r"library kernel extern_kernels\.mm .*vendor library"),
    (_FALLBACK, r"falls back on the ATen op torch\.ops\.aten\.sort\.default"),
    (_SYMBOLIC, r"a size at run time \(a dynamic shape\)"),
])
def test_what_inductor_did_not_generate_is_refused_with_its_name(text: str, reason: str) -> None:
    with pytest.raises(GenerationError, match=reason) as refused:
        parse_output_code(text)
    # a library call, and only that, is worth capturing again with Triton templates
    assert isinstance(refused.value, LibraryCall) == ("extern_kernels" in reason)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine "
                                                      "without a GPU")
def test_without_a_gpu_a_triton_start_says_why(silu_task_copy: Path) -> None:
    task = load_task(silu_task_copy, "cpu")
    with pytest.raises(GenerationError, match="needs a GPU|only where a GPU is present"):
        generate_start(task, "triton", [dict(task.tuning_shapes[0])])


@pytest.mark.gpu
def test_triton_start_from_torch_compile_on_the_gpu(silu_task_copy: Path,
                                                    compile_cache: Path) -> None:
    from kernelswarm.experiments.authoring.compiled_start import start_from_compile

    settings = EvaluatorSettings(device="cuda", cache_dir=compile_cache, timing_budget_s=0.05,
                                 min_repeats=3)
    result = start_from_compile(silu_task_copy, "triton", force=True, settings=settings)
    assert result.status is Status.OK, result.message
    task = load_task(silu_task_copy, "cuda")
    assert {Shape.of(dict(s)).label for s in task.tuning_shapes} <= set(result.shapes)
    assert "triton_poi_" in result.path.read_text()


def test_shapes_of_the_same_sizes_in_two_dtypes_get_a_version_each(tiny_silu_task: Path) -> None:
    task = load_task(tiny_silu_task, "cpu")
    first = _silu_shapes(task)[0]
    half = ShapeCode(first.label.replace("float32", "float16"), first.code, first.graph_inputs,
                     first.arguments, ("float16",),
                     tuple((size, "float16") for size, _ in first.outputs), first.input_sizes)
    source, knobs = triton_start("silu_and_mul", [first, half], {first.label, half.label})
    assert "a1.dtype == torch.float32" in source and "a1.dtype == torch.float16" in source
    assert {"XBLOCK_S0", "XBLOCK_S1"} <= set(knobs)


def test_a_version_launches_as_the_baselines_compile_did_where_it_ran_the_same_kernel(
        tiny_silu_task: Path) -> None:
    from kernelswarm.evaluators.inductor.inductor_start import adopt_configs

    task = load_task(tiny_silu_task, "cpu")
    shape = _silu_shapes(task)[0]
    name = next(iter(shape.code.kernels))
    timed = adopt_configs(shape, {name: {"XBLOCK": 256, "num_warps": 2, "num_stages": 1},
                                  "triton_other_kernel": {"XBLOCK": 64}})
    assert timed.launch_config(name) == {"XBLOCK": 256, "num_warps": 2, "num_stages": 1}
    assert "triton_other_kernel" not in dict(timed.launch_configs)  # not a kernel of this code
    source, _ = triton_start("silu_and_mul", [timed])
    assert "XBLOCK=(XBLOCK or 256)" in source and "num_warps=(NUM_WARPS or 2), num_stages=1" \
        in source


_RUN_CUMSUM = """
import sys, importlib.util, torch
spec = importlib.util.spec_from_file_location("generated", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
x = torch.randn(5, 3000)
out = torch.full((5, 3000), float("nan"))
module.start(out, x, 5, 3000, RED_XBLOCK=2, RED_RBLOCK=1024)
torch.testing.assert_close(out, torch.cumsum(x, -1), atol=1e-3, rtol=1e-3)
print("matches cumsum")
"""


def _cumsum_shape(text: str, label: str, rows: int, cols: int) -> ShapeCode:
    arguments = (Argument(ArgKind.OUTPUT, 0), Argument(ArgKind.INPUT, 0),
                 Argument(ArgKind.SCALAR, value=(rows,)), Argument(ArgKind.SCALAR, value=(cols,)))
    return ShapeCode(label, parse_output_code(text), (0,), arguments, ("float32",),
                     (((rows, cols), "float32"),), ((rows, cols),))


def test_a_scan_keeps_its_combine_function_and_computes_the_cumulative_sum(tmp_path: Path
                                                                             ) -> None:
    # KernelBench's cumsum problems: Inductor scans each chunk of a row with a combine function
    # defined beside the kernel, and carries the chunk's total with triton_helpers.select_one
    shape = _cumsum_shape(inductor_texts.looped_cumsum(5, 3000), "rows=5,cols=3000", 5, 3000)
    source, knobs = triton_start("start", [shape])
    assert set(knobs) == {"RED_XBLOCK", "RED_RBLOCK", "NUM_WARPS"}
    assert "def helper_select_one(" in source and "def s0__triton_helper_fn_add0(" in source
    assert screen(source, TritonLanguage.screen_rules) is None
    (tmp_path / "kernel.py").write_text(source)
    done = _interpret(_RUN_CUMSUM, tmp_path / "kernel.py")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "matches cumsum" in done.stdout


def test_a_check_shape_whose_code_the_start_cannot_hold_costs_the_check_not_the_start() -> None:
    # On KernelBench's 89_cumsum Inductor wrote a split scan (a workspace zeroed on the host)
    # for the tester's one-row check shape: that shape is left out, with the reason, as is one
    # whose kernel is of a kind the start does not launch
    from kernelswarm.evaluators.inductor.inductor_start import writable_optional

    required = [_cumsum_shape(inductor_texts.looped_cumsum(5, 3000), "rows=5", 5, 3000)]
    try:
        parse_output_code(inductor_texts.split_scan_cumsum(3000))
    except GenerationError as exc:
        split = f"rows=1 (GenerationError: {exc})"
    split_kind = _cumsum_shape(inductor_texts.looped_cumsum(3, 3000).replace(
        "triton_red_fused_cumsum_0", "triton_spl_fused_cumsum_0"), "rows=3", 3, 3000)
    odd = _cumsum_shape(inductor_texts.looped_cumsum(7, 3000), "rows=7", 7, 3000)

    def write(shapes: list[ShapeCode]) -> tuple[str, dict]:
        return triton_start("start", shapes, {"rows=5"})

    kept, skipped = writable_optional(required, [split, split_kind, odd], write)
    assert [s.label for s in kept] == ["rows=7"]
    assert "workspace_0.zero_" in skipped[0] and skipped[1].startswith("rows=3 (GenerationError:")
    assert "not one of Inductor's pointwise, reduction or template kernels" in skipped[1]
    source, _ = write(required + kept)
    assert "rows=5, rows=7" in source  # both versions, none for the left-out shapes
    with pytest.raises(GenerationError, match="triton_spl_"):  # the required shapes must hold
        writable_optional([split_kind], [], write)


_RUN_MATMUL = """
import sys, importlib.util, torch
spec = importlib.util.spec_from_file_location("generated", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
a, b = torch.randn(70, 40), torch.randn(40, 50)
out = torch.full((70, 50), float("nan"))
module.start(a, b, out)
torch.testing.assert_close(out, a @ b, atol=1e-4, rtol=1e-4)
print("matches matmul")
"""


def test_a_matmul_template_is_launched_on_the_grid_inductor_computed(tmp_path: Path) -> None:
    # KernelBench's matmuls (and every level 2 problem): in max-autotune with Triton as the GEMM
    # backend Inductor writes a template whose tile is its body's constants, its warps and
    # stages the decorator's, and whose grid call() passes after the arguments
    arguments = (Argument(ArgKind.INPUT, 0), Argument(ArgKind.INPUT, 1),
                 Argument(ArgKind.OUTPUT, 0))
    shape = ShapeCode("m=70,n=50,k=40", parse_output_code(inductor_texts.mm_template(70, 50, 40)),
                      (0, 1), arguments, ("float32", "float32"), (((70, 50), "float32"),),
                      ((70, 40), (40, 50)))
    source, knobs = triton_start("start", [shape])
    assert set(knobs) == {"NUM_WARPS"}  # the tile is the autotuned choice's; warps are tuned
    assert "[(6, 1, 1)](a0, a1, a2, num_warps=(NUM_WARPS or 4), num_stages=2)" in source
    assert screen(source, TritonLanguage.screen_rules) is None
    (tmp_path / "kernel.py").write_text(source)
    done = _interpret(_RUN_MATMUL, tmp_path / "kernel.py")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "matches matmul" in done.stdout
    wrong = inductor_texts.mm_template(70, 50, 40).replace("6, 1, 1, stream", "6, 1, stream")
    bad = ShapeCode("m=70", parse_output_code(wrong), (0, 1), arguments, ("float32", "float32"),
                    (((70, 50), "float32"),), ((70, 40), (40, 50)))
    with pytest.raises(GenerationError, match="a grid of three numbers"):
        triton_start("start", [bad])
