"""A cuda dispatch kernel: silu_and_mul vectorised and split along rows, with a different launch
geometry per tuning shape. NVRTC builds it on the CPU (its artifact carries the table, its
kernels one copy per route); on a GPU the real evaluator judges it on every tuning and held-out
shape, the launcher reading each route's knobs."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess

import pytest

from kernelswarm.agents.builtin.dispatch_source import compose
from kernelswarm.search import Candidate, Status, load_task
from kernelswarm.search.dispatch import read_dispatch_table, route_symbol
from tests.agents.test_cuda_transforms import TASKS
from tests.agents.test_cuda_transforms import compose as rewritten

needs_nvrtc = pytest.mark.skipif(
    importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.core") is None,
    reason="NVRTC through cuda.core is not installed")

# One geometry per cuda tuning shape of silu_and_mul, in the task's order: small blocks and a
# row split for decode, wide vectors for prefill, odd choices in between.
GEOMETRIES = [{"BLOCK": 128, "VEC": 8, "SPLIT": 64}, {"BLOCK": 256, "VEC": 4, "SPLIT": 16},
              {"BLOCK": 512, "VEC": 2, "SPLIT": 1}, {"BLOCK": 1024, "VEC": 8, "SPLIT": 4},
              {"BLOCK": 256, "VEC": 8, "SPLIT": 1}, {"BLOCK": 64, "VEC": 1, "SPLIT": 8}]


def dispatch_kernel() -> Candidate:
    base = rewritten("silu_and_mul", ["vectorize", "split_rows"])
    shapes = load_task(TASKS / "silu_and_mul", "cuda").tuning_shapes
    routes = [(dict(shape), {**base.knob_values, **knobs})
              for shape, knobs in zip(shapes, GEOMETRIES, strict=True)]
    composed = compose(base.source, "cuda", base.entry, routes)
    assert composed is not None
    return base.derive(source=composed[0], knob_space={}, knobs={})


@needs_nvrtc
def test_nvrtc_builds_a_cuda_dispatch_kernel_whose_artifact_carries_the_table(tmp_path):
    from kernelswarm.evaluators.languages.cuda import CudaLanguage
    from kernelswarm.evaluators.languages.nvrtc import read_artifact

    candidate = dispatch_kernel()
    table = read_dispatch_table(candidate.source)
    assert table is not None and table.exact == ("dtype",) and len(table.routes) == 6
    artifact = tmp_path / "kernel.kscubin"
    CudaLanguage("sm_90").build(candidate, tmp_path, artifact, timeout_s=300)
    header, cubin = read_artifact(artifact)
    assert header["dispatch"] == table.to_json() and cubin
    for i in range(6):
        for kernel in ("silu_and_mul_bf16", "silu_and_mul_f16"):
            assert route_symbol(kernel, i) in header["kernels"]


@pytest.mark.gpu
def test_a_cuda_dispatch_kernel_is_correct_on_every_shape_on_the_gpu(tmp_path):
    from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator

    settings = EvaluatorSettings(device="cuda", cache_dir=tmp_path, run_timeout_s=60.0, seeds=2,
                                 warmup=2, min_repeats=10, max_repeats=50, timing_budget_s=0.1)
    with SandboxEvaluator(TASKS / "silu_and_mul", "cuda", settings) as evaluator:
        verdict = evaluator.evaluate(dispatch_kernel())
    assert verdict.status is Status.OK, verdict.message
    assert len(verdict.shapes) == 6 and all(s.correct for s in verdict.shapes)
    launches = verdict.resources.get("launches", [])
    routes = {launch["kernel"].rsplit("__route", 1)[1] for launch in launches}
    assert len(routes) >= 4, launches  # the shapes really took different routes


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_the_cuda_dispatch_file_compiles_alone_with_nvcc(tmp_path):
    # The stored file is self-contained: no knob on the command line, every route's kernels in it.
    (tmp_path / "kernel.cu").write_text(dispatch_kernel().source)
    built = subprocess.run(["nvcc", "-arch=sm_90", "-std=c++17", "--cubin", "kernel.cu", "-o",
                            "kernel.cubin"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    cubin = (tmp_path / "kernel.cubin").read_bytes()  # kernel names are in its symbol table
    assert all(route_symbol("silu_and_mul_bf16", i).encode() in cubin for i in range(6))
