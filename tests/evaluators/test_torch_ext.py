"""The torch-ext language on the CPU: one real load_inline build (~30-60 s), shared by the module.

Every other test here stops before the compiler (screen, binding check), so the suite pays for
one build only; the content-hash cache makes the second compile of it free.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelswarm.evaluators import SandboxEvaluator
from kernelswarm.evaluators.languages.torch_ext import torch_arch_list, trim_build_log
from kernelswarm.search import Candidate, CompileResult, Evaluation, Status
from tests.conftest import SILU_TASK
from tests.evaluators.kernel_library import quick_settings


@pytest.fixture(scope="module")
def ext_evaluator(compile_cache: Path) -> Iterator[SandboxEvaluator]:
    settings = quick_settings(compile_cache, compile_timeout_s=600.0, run_timeout_s=30.0)
    ev = SandboxEvaluator(SILU_TASK, "torch-ext", settings)
    yield ev
    ev.close()


@pytest.fixture(scope="module")
def ext_start(ext_evaluator: SandboxEvaluator) -> Candidate:
    return ext_evaluator.start_candidate


@pytest.fixture(scope="module")
def first_build(ext_evaluator: SandboxEvaluator, ext_start: Candidate) -> CompileResult:
    return ext_evaluator.compile(ext_start)


@pytest.fixture(scope="module")
def start_evaluation(ext_evaluator: SandboxEvaluator, ext_start: Candidate,
                     first_build: CompileResult) -> Evaluation:
    return ext_evaluator.evaluate(ext_start)


@pytest.mark.slow
def test_the_starting_extension_builds_once_and_is_ok(ext_evaluator, ext_start, first_build,
                                                       start_evaluation):
    assert first_build.ok, first_build.log
    again = ext_evaluator.compile(ext_start)
    assert again.ok and again.cached
    assert start_evaluation.status is Status.OK, start_evaluation.message
    assert len(start_evaluation.shapes) == 3
    assert 0.5 < start_evaluation.speedup < 2.0
    for shape in start_evaluation.shapes:
        assert shape.correct and shape.max_abs_err <= 1e-5


@pytest.mark.slow
def test_the_extension_is_never_loaded_in_the_judges_process(start_evaluation):
    assert start_evaluation.ok
    assert not [name for name in sys.modules if name.startswith("kernelswarm_ext_")]


def test_a_source_that_binds_nothing_is_a_compile_error_before_any_compiler_runs(
        ext_evaluator, ext_start):
    unbound = ext_start.source[:ext_start.source.index("PYBIND11_MODULE")]
    built = ext_evaluator.compile(ext_start.derive(source=unbound))
    assert not built.ok and not built.rejected
    assert "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)" in built.log
    assert built.seconds < 5


@pytest.mark.parametrize("line, rule", [
    ("at::parallel_for(0, n, 1, [&](int64_t b, int64_t e) {});", "ATen thread pool"),
    ("auto y = at::native::mul(a, b);", "PyTorch around the dispatcher"),
    ("at::cpu::mul_out(out, a, b);", "PyTorch around the dispatcher"),
    ("c10::impl::ExcludeDispatchKeyGuard guard(ks);", "PyTorch around the dispatcher"),
    ("auto s = at::cuda::getStreamFromPool();", "PyTorch around the dispatcher"),
    ("cudaStreamCreate(&stream);", "streams, events and graphs"),
    ("cudaEventRecord(start);", "streams, events and graphs"),
    ("py::module_::import(\"os\");", "Python from C++"),
    ("PyRun_SimpleString(\"import os\");", "the Python C API"),
    ("std::thread t(work);", "threads"),
    ("FILE* f = fopen(\"/etc/passwd\", \"r\");", "files"),
])
def test_the_screen_refuses_threads_streams_python_and_aten_around_the_dispatcher(
        ext_evaluator, ext_start, line, rule):
    source = ext_start.source.replace("#include <cmath>\n", f"#include <cmath>\n{line}\n")
    evaluation = ext_evaluator.evaluate(ext_start.derive(source=source))
    assert evaluation.status is Status.REJECTED
    assert f"uses {rule}" in evaluation.message


def test_the_current_stream_and_the_starting_kernels_cuda_path_pass_the_screen(ext_evaluator,
                                                                               ext_start):
    from kernelswarm.evaluators.languages.screen import screen

    assert "getCurrentCUDAStream" in ext_start.source
    assert screen(ext_start.source, ext_evaluator.language.screen_rules) is None


def test_build_logs_keep_gcc_and_nvcc_errors():
    log = ("ninja: build stopped\nkernel.cpp:12:5: error: 'y' was not declared\n  y = 1;\n"
           "    ^\nkernel.cpp(40): error: identifier \"z\" is undefined\n")
    trimmed = trim_build_log(log)
    assert "kernel.cpp:12:5: error" in trimmed and "kernel.cpp(40): error" in trimmed
    assert "ninja: build stopped" not in trimmed


def test_the_cuda_architecture_is_given_as_torch_expects_it():
    assert torch_arch_list("sm_90") == "9.0"
    assert torch_arch_list("sm_90a") == "9.0a"
    assert torch_arch_list("sm_100") == "10.0"
