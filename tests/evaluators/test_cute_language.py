"""The cute language: where CUTLASS's headers come from, the arch-specific target, the screen, and
NVRTC builds of the built-in tasks' CuTe kernels (their PTX: 128-bit copies, tensor-core MMAs fed
by cp.async and ldmatrix); on a GPU, each task's CuTe kernel judged on every shape.

NVRTC builds need ``cuda.core`` and CUTLASS's headers (``pip install 'kernelswarm[cute]'``):
skipped, with the reason, where either is missing. The GPU tests are marked ``gpu``.
"""

from __future__ import annotations

import collections
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernelswarm.agents.builtin.dispatch_source import compose
from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator
from kernelswarm.evaluators.languages import get_language
from kernelswarm.evaluators.languages.compile_cache import CompileCache
from kernelswarm.evaluators.languages.cuda import toolkit_include_dirs
from kernelswarm.evaluators.languages.cute import (
    CUTE_DEFINES,
    CUTE_OPTIONS,
    CUTE_SCREEN_RULES,
    CuteLanguage,
    arch_specific,
    cutlass_include_dir,
    libcudacxx_include_dirs,
)
from kernelswarm.evaluators.languages.nvrtc import compile_source, read_artifact
from kernelswarm.evaluators.languages.screen import screen
from kernelswarm.search import Status, load_task
from tests.conftest import ROOT

TASKS = ROOT / "experiments" / "tasks"


def _missing() -> str | None:
    if importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.core") is None:
        return "NVRTC through cuda.core is not installed (pip install cuda-core cuda-bindings)"
    try:
        cutlass_include_dir()
    except RuntimeError as exc:
        return str(exc)
    return None


needs_build = pytest.mark.skipif(_missing() is not None, reason=str(_missing()))
GPU_REASON = None if torch.cuda.is_available() else "no NVIDIA GPU visible to torch"


def _start(task: str):
    return load_task(TASKS / task, "cuda").starting_candidate("cute")


@pytest.mark.parametrize("given, target", [
    ("sm_90", "sm_90a"), ("sm_90a", "sm_90a"), ("sm_100", "sm_100a"), ("sm_120", "sm_120a"),
    ("sm_80", "sm_80"), ("sm_89", "sm_89"), ("sm_75", "sm_75")])
def test_hopper_and_later_build_for_the_arch_specific_target(given, target):
    assert arch_specific(given) == target
    assert CuteLanguage(given).arch == target


@pytest.mark.parametrize("task", ["silu_and_mul", "fused_add_rmsnorm", "gemm"])
def test_the_tasks_cute_kernels_pass_the_screen_and_include_cute(task):
    source = _start(task).source
    assert screen(source, CUTE_SCREEN_RULES) is None
    assert "#include <cute/tensor.hpp>" in source


@pytest.mark.parametrize("line", [
    "#include <torch/extension.h>", "#include <ATen/ATen.h>", "#include <c10/cuda/CUDAStream.h>",
    "#include <Python.h>", "#include <pybind11/pybind11.h>", "auto t = at::empty({4});",
    "torch::Tensor t;"])
def test_pytorch_and_python_are_refused_in_a_cute_kernel(line):
    finding = screen(f"#include <cute/tensor.hpp>\n{line}\n", CUTE_SCREEN_RULES)
    assert finding is not None and finding.rule.name == "PyTorch, Python or host code"
    assert finding.line == 2


def test_cudas_rules_hold_for_cute_too():
    finding = screen('extern "C" __global__ void k() {\n long long t = clock64();\n}\n',
                     CUTE_SCREEN_RULES)
    assert finding is not None and finding.rule.name == "timers"


def _run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})


def test_a_cutlass_path_without_headers_is_named_in_the_error(tmp_path):
    done = _run_python("from kernelswarm.evaluators.languages.cute import cutlass_include_dir\n"
                       "try:\n    cutlass_include_dir()\nexcept RuntimeError as e:\n"
                       "    print(e)\nelse:\n    print('found')", CUTLASS_PATH=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert f"CUTLASS_PATH={tmp_path}" in done.stdout and "kernelswarm[cute]" in done.stdout


def test_a_cutlass_path_with_headers_is_used(tmp_path):
    (tmp_path / "include" / "cute").mkdir(parents=True)
    (tmp_path / "include" / "cute" / "tensor.hpp").write_text("// a CuTe checkout's header\n")
    done = _run_python("from kernelswarm.evaluators.languages.cute import cutlass_include_dir\n"
                       "print(cutlass_include_dir())", CUTLASS_PATH=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str((tmp_path / "include").resolve())


def _ptx(source: str, **knobs: int) -> str:
    defines = [*CUTE_DEFINES, *((k, str(v)) for k, v in knobs.items())]
    includes = [cutlass_include_dir(), *libcudacxx_include_dirs(), *toolkit_include_dirs()]
    return compile_source(source, "sm_90a", defines, includes, CUTE_OPTIONS).ptx


def _accesses(ptx: str) -> collections.Counter:
    return collections.Counter(re.findall(r"\b(?:ld|st)\.global(?:\.nc)?(?:\.v\d)?\.\w+", ptx))


@needs_build
@pytest.mark.parametrize("task, entry", [("silu_and_mul", "silu_and_mul_bf16"),
                                         ("fused_add_rmsnorm", "fused_add_rmsnorm_bf16")])
def test_the_elementwise_kernels_move_128_bit_vectors(task, entry):
    ptx = _ptx(_start(task).source, VEC=8)
    body = ptx[ptx.index(f".entry {entry}"):]
    body = body[:body.find(".entry ", 1)] if ".entry " in body[1:] else body
    found = _accesses(body)
    # the vector path loads and stores whole 16-byte vectors; 16-bit accesses are the path for
    # rows whose length is not a multiple of VEC
    assert found["ld.global.v4.u32"] >= 2 and found["st.global.v4.u32"] >= 1, found
    assert not any(k.startswith("st.global") and k.endswith(".u32") and ".v" not in k
                   for k in found), found


@needs_build
@pytest.mark.slow  # a CuTe MMA kernel: about 35 s of NVRTC on one core
def test_the_gemm_runs_on_tensor_cores_fed_by_cp_async_and_ldmatrix(tmp_path):
    language = CuteLanguage("sm_90")
    build = CompileCache(tmp_path).build(language, _start("gemm"), 600.0)
    assert build.result.ok, build.result.log
    header, _ = read_artifact(build.artifact)
    assert header["arch"] == "sm_90a"
    resources = header["kernels"]["gemm_bf16"]
    assert resources["spill_store_bytes"] == 0 and resources["registers"] <= 255
    ptx = _ptx(_start("gemm").source)
    for instruction in ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                        "cp.async.cg.shared.global", "ldmatrix.sync.aligned.x4.m8n8.shared.b16",
                        "ldmatrix.sync.aligned.x4.trans.m8n8.shared.b16"):
        assert instruction in ptx, instruction


@needs_build
def test_a_dispatch_kernel_of_cute_routes_builds_with_a_copy_per_route(tmp_path):
    start = _start("silu_and_mul")
    shapes = load_task(TASKS / "silu_and_mul", "cuda").tuning_shapes
    composed = compose(start.source, "cute", start.entry,
                                [(shapes[0], {"BLOCK": 128, "VEC": 4}),
                                 (shapes[-1], {"BLOCK": 512, "VEC": 8})])
    assert composed is not None
    source, table = composed
    build = CompileCache(tmp_path).build(CuteLanguage("sm_90"),
                                         start.derive(source=source, knob_space={}), 120.0)
    assert build.result.ok, build.result.log
    header, _ = read_artifact(build.artifact)
    assert {"silu_and_mul_bf16__route0", "silu_and_mul_bf16__route1"} <= set(header["kernels"])
    assert header["dispatch"] == table.to_json()


@needs_build
def test_a_cute_compile_error_names_the_line(tmp_path):
    start = _start("silu_and_mul")
    broken = start.derive(source=start.source.replace("make_layout(", "make_layuot(", 1))
    build = CompileCache(tmp_path).build(CuteLanguage("sm_90"), broken, 120.0)
    assert not build.result.ok and "make_layuot" in build.result.log


# On a GPU: each task's CuTe kernel, judged as a search judges a candidate, on every shape.

def _settings(cache: Path) -> EvaluatorSettings:
    return EvaluatorSettings(device="cuda", cache_dir=cache, compile_timeout_s=600.0, seeds=1,
                             warmup=1, min_repeats=3, max_repeats=20, timing_budget_s=0.05)


@pytest.mark.gpu
@needs_build
@pytest.mark.skipif(GPU_REASON is not None, reason=f"needs a GPU: {GPU_REASON}")
@pytest.mark.parametrize("task", ["silu_and_mul", "fused_add_rmsnorm", "gemm"])
def test_each_cute_start_is_correct_on_every_shape_of_its_task(compile_cache, task):
    evaluator = SandboxEvaluator(TASKS / task, "cute", _settings(compile_cache))
    try:
        start = evaluator.start_candidate
        # as written, and (but for gemm, whose every knob setting benchmarks/cute_gemm.py checks)
        # with every knob at its second value: other block sizes, vectors, items
        variants = [{}] if task == "gemm" else \
            [{}, {name: values[1] for name, values in start.space.items()}]
        for knobs in variants:
            evaluation = evaluator.evaluate(start.derive(knobs=knobs) if knobs else start)
            assert evaluation.status is Status.OK, f"{knobs}: {evaluation.message}"
            assert all(s.correct for s in evaluation.shapes)
    finally:
        evaluator.close()


@pytest.mark.gpu
@needs_build
@pytest.mark.skipif(GPU_REASON is not None, reason=f"needs a GPU: {GPU_REASON}")
def test_a_cute_kernel_that_skips_the_tail_is_incorrect(compile_cache):
    # the vector path alone: a row whose length is not a multiple of VEC is left unwritten
    evaluator = SandboxEvaluator(TASKS / "silu_and_mul", "cute", _settings(compile_cache))
    try:
        start = evaluator.start_candidate
        source = start.source.replace("if (d % VEC == 0) {", "if (true) {", 1)
        assert source != start.source
        evaluation = evaluator.evaluate(start.derive(source=source))
        assert evaluation.status in (Status.INCORRECT, Status.RUNTIME_ERROR), evaluation.message
    finally:
        evaluator.close()


def test_get_language_knows_cute():
    assert isinstance(get_language("cute"), CuteLanguage)
