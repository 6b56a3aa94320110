"""The suite's cuda and triton starting kernels without a GPU.

cuda: each task's ``KERNELS["cuda"]`` names a source whose ``extern "C" __global__`` kernels
cover every dtype of the task's cuda shapes, and NVRTC (through the evaluator's build, for an
sm_90 target; no GPU needed) builds it at every knob value without spills. triton: the starting
kernels pass the real evaluator on the tasks' CPU shapes under Triton's interpreter.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator
from kernelswarm.evaluators.languages.compile_cache import cache_key
from kernelswarm.experiments.config import BUILTIN_TASKS
from kernelswarm.search import Status, load_task

SUITE = ("fused_add_rmsnorm", "merge_attn_states_lse", "softmax", "gemm")
TRITON_TASKS = ("fused_add_rmsnorm", "softmax")
_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

needs_nvrtc = pytest.mark.skipif(
    importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.core") is None,
    reason="NVRTC through cuda.core is not installed (pip install cuda-core cuda-bindings "
           "nvidia-cuda-nvrtc)")


def _global_kernels(source: str) -> set[str]:
    """Names of the ``extern "C" __global__`` kernels a CUDA source defines."""
    pattern = r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s*)?(\w+)\s*\('
    return set(re.findall(pattern, source))


@pytest.mark.parametrize("name", SUITE)
def test_cuda_starting_kernel_covers_every_dtype_of_the_cuda_shapes(name):
    task = load_task(BUILTIN_TASKS / name, "cuda")
    kernel = task.kernel("cuda")
    defined = _global_kernels(kernel.source)
    assert kernel.entry in defined
    by_dtype = task.module._CUDA_KERNELS
    assert set(by_dtype.values()) <= defined
    dtypes = {_DTYPES[s["dtype"]] for s in (*task.tuning_shapes, *task.heldout_shapes)}
    assert dtypes <= set(by_dtype), f"no cuda kernel for {dtypes - set(by_dtype)}"
    assert callable(task.module.launch_cuda)
    for knob in kernel.knobs:  # a knob is a macro with a default, so the source builds alone
        assert re.search(rf"#ifndef {knob}\b", kernel.source)


@pytest.fixture(scope="module")
def cuda_builds(compile_cache: Path) -> dict[str, SandboxEvaluator]:
    """One evaluator per task that only builds (its sandbox never starts here)."""
    settings = EvaluatorSettings(device="cuda", cuda_arch="sm_90", cache_dir=compile_cache)
    return {name: SandboxEvaluator(BUILTIN_TASKS / name, "cuda", settings) for name in SUITE}


@needs_nvrtc
@pytest.mark.parametrize("name", SUITE)
def test_nvrtc_builds_every_knob_value_without_spills(cuda_builds, compile_cache, name):
    from kernelswarm.evaluators.languages.nvrtc import read_artifact

    evaluator = cuda_builds[name]
    start = evaluator.start_candidate
    (knob, values), = start.space.items()
    kernels = set(evaluator.task.module._CUDA_KERNELS.values())
    for value in values:
        candidate = start.derive(knobs={knob: value})
        result = evaluator.compile(candidate)
        assert result.ok, f"{knob}={value}:\n{result.log}"
        artifact = compile_cache / f"{cache_key(evaluator.language, candidate)}.kscubin"
        header, _ = read_artifact(artifact)
        assert header["knobs"] == {knob: value}
        assert kernels <= set(header["kernels"])
        for kernel in kernels:
            assert header["kernels"][kernel]["spill_store_bytes"] == 0, (kernel, knob, value)


@pytest.fixture(scope="module")
def triton_evaluators(compile_cache: Path) -> Iterator[dict[str, SandboxEvaluator]]:
    # One seed and one warm-up round: Triton's interpreter pays ~0.4 ms per operation and
    # program, so the tasks' CPU shapes take a few tenths of a second a call; on a loaded
    # 2-core machine one evaluation's run phase took over the default 30 s, hence 120.
    settings = EvaluatorSettings(timing_budget_s=0.05, min_repeats=3, flush_cache=False,
                                 seeds=1, warmup=1, cache_dir=compile_cache, run_timeout_s=120)
    made = {name: SandboxEvaluator(BUILTIN_TASKS / name, "triton", settings)
            for name in TRITON_TASKS}
    yield made
    for evaluator in made.values():
        evaluator.close()


@pytest.mark.parametrize("name", TRITON_TASKS)
def test_triton_starting_kernel_passes_the_evaluator_on_the_cpu_shapes(triton_evaluators, name):
    evaluator = triton_evaluators[name]
    evaluation = evaluator.evaluate(evaluator.start_candidate)
    assert evaluation.status is Status.OK, evaluation.message
    assert "held-out" in evaluation.message
    assert len(evaluation.shapes) == len(evaluator.task.tuning_shapes)
    assert all(s.correct and s.time_us > 0 for s in evaluation.shapes)
    # The CPU shapes cover a program with rows past the end (1 row, ROWS=4) and rows of several
    # chunks with a partial last one (32000 columns, held-out 4099, at BLOCK=4096).
    assert evaluator.start_candidate.knob_values == {"BLOCK": 4096, "ROWS": 4}


_MERGE_CHECK = r"""
import importlib.util, json, math, sys
import torch
spec = importlib.util.spec_from_file_location("task", sys.argv[1] + "/task.py")
task = importlib.util.module_from_spec(spec); spec.loader.exec_module(task)
spec = importlib.util.spec_from_file_location("k", sys.argv[1] + "/merge_attn_states_lse_triton.py")
kernel = importlib.util.module_from_spec(spec); spec.loader.exec_module(kernel)
worst = {}
for shape, knobs in json.loads(sys.argv[2]):
    inputs = task.make_inputs(shape, 0, "cpu")
    outputs = task.make_outputs(shape, "cpu")
    fn = lambda *a, knobs=knobs: kernel.merge_attn_states_lse(*a, **knobs)
    task.launch_triton(fn, inputs, outputs, shape)
    expected = task.reference(*inputs)
    for got, want in zip(outputs, expected):
        assert torch.equal(torch.isneginf(got), torch.isneginf(want)), (shape, knobs)
        finite = torch.isfinite(want)
        error = (got[finite].float() - want[finite].float()).abs().max().item()
        worst[json.dumps([shape, knobs])] = max(worst.get(json.dumps([shape, knobs]), 0), error)
print(json.dumps(worst))
"""


def test_merge_triton_start_matches_the_reference_under_the_interpreter(tmp_path):
    # The starting knobs, and knobs whose chunks do not divide head_dim (80, 136) or whose
    # programs run past the last (token, head) pair; both edge cases of make_inputs (one part
    # empty, both parts empty: output 0, lse -inf) are in every problem.
    import json
    import os
    import subprocess
    import sys

    shapes = [({"tokens": 16, "heads": 32, "head_dim": 128, "dtype": "float32"},
               {"BLOCK": 128, "ROWS": 8}),
              ({"tokens": 3, "heads": 5, "head_dim": 80, "dtype": "float32"},
               {"BLOCK": 64, "ROWS": 4}),
              ({"tokens": 7, "heads": 3, "head_dim": 136, "dtype": "float32"},
               {"BLOCK": 128, "ROWS": 16})]
    task = load_task(BUILTIN_TASKS / "merge_attn_states_lse", "cpu")
    assert task.kernel("triton").knobs == {"BLOCK": (128, 64, 256), "ROWS": (8, 1, 2, 4, 16)}
    done = subprocess.run(
        [sys.executable, "-c", _MERGE_CHECK, str(BUILTIN_TASKS / "merge_attn_states_lse"),
         json.dumps(shapes)], capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "TRITON_INTERPRET": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    worst = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(worst) == len(shapes)
    assert max(worst.values()) < 1e-5, worst
