"""Triton kernels loaded after the runner's isolation: interpreted on the CPU (no compiler
needed), compiled on a GPU inside the compile window and unable to compile once it is closed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from kernelswarm.evaluators.sandbox.isolation import isolated_command
from tests.evaluators.test_isolation_os import SANDBOX, require_seccomp

GPU_KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def double(out_ptr, x_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + i, 2 * tl.load(x_ptr + i, mask=i < n), mask=i < n)
'''

GPU_PROBE = textwrap.dedent("""
    import importlib, json, sys, types
    import torch
    config = json.loads(sys.argv[1])
    package = types.ModuleType("isolation_under_test")
    package.__path__ = [config["sandbox"]]
    sys.modules["isolation_under_test"] = package
    isolation = importlib.import_module("isolation_under_test.isolation")
    torch.cuda.init()
    x = torch.arange(4096, device="cuda", dtype=torch.float32)
    report = isolation.enter_isolation(config["scratch"], allow_processes=True)
    sys.path.insert(0, config["scratch"])
    import gpu_kernel  # the candidate: loaded after isolation
    out = {"report": report}

    def run(block):
        y = torch.empty_like(x)
        gpu_kernel.double[(triton.cdiv(x.numel(), block),)](y, x, x.numel(), BLOCK=block)
        torch.cuda.synchronize()
        return bool(torch.equal(y, 2 * x))

    import triton
    out["compiled_in_window"] = run(256)
    out["strays"] = isolation.forbid_processes()
    out["cached_after"] = run(256)
    try:
        out["new_compile_after"] = run(512)
    except Exception as exc:  # a compiler cannot start once the window is closed
        out["new_compile_after"] = type(exc).__name__
    out["matmul"] = bool(torch.allclose((x[:64, None] @ x[None, :64]).sum(), x[:64].sum() ** 2))
    from torch.profiler import ProfilerActivity, profile  # CUPTI, as the runner's profile uses
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run(256)
    out["profiled"] = [e.name for e in prof.events() if "double" in e.name][:1]
    print(json.dumps(out))
""")


@pytest.mark.gpu
def test_cuda_and_a_triton_compile_window_work_under_isolation(tmp_path):
    require_seccomp()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "gpu_kernel.py").write_text(GPU_KERNEL)
    config = {"sandbox": str(SANDBOX), "scratch": str(scratch)}
    argv, options = isolated_command([sys.executable, "-c", GPU_PROBE, json.dumps(config)],
                                     scratch)
    done = subprocess.run(argv, cwd=scratch, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TRITON_CACHE_DIR": str(scratch / "triton")},
                          **options)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["compiled_in_window"] and out["cached_after"] and out["matmul"]
    assert out["profiled"], "torch.profiler saw no kernel under the seccomp filter"
    assert out["strays"] == []
    assert out["new_compile_after"] != True  # noqa: E712 - a bool True would mean a compiler ran


INTERPRETER_PROBE = textwrap.dedent("""
    import importlib, json, sys, types
    import torch
    import triton
    config = json.loads(sys.argv[1])
    package = types.ModuleType("isolation_under_test")
    package.__path__ = [config["sandbox"]]
    sys.modules["isolation_under_test"] = package
    isolation = importlib.import_module("isolation_under_test.isolation")
    report = isolation.enter_isolation(config["scratch"])
    sys.path.insert(0, config["scratch"])
    import gpu_kernel  # the candidate: loaded after isolation
    x = torch.arange(4096, dtype=torch.float32)
    y = torch.empty_like(x)
    gpu_kernel.double[(triton.cdiv(x.numel(), 256),)](y, x, x.numel(), BLOCK=256)
    print(json.dumps({"report": report, "right": bool(torch.equal(y, 2 * x))}))
""")


def test_a_triton_kernel_runs_in_the_interpreter_under_isolation(tmp_path):
    """On the CPU, triton interprets kernels (no compiler): no compile window is needed."""
    require_seccomp()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "gpu_kernel.py").write_text(GPU_KERNEL)
    config = {"sandbox": str(SANDBOX), "scratch": str(scratch)}
    argv, options = isolated_command([sys.executable, "-c", INTERPRETER_PROBE,
                                      json.dumps(config)], scratch)
    done = subprocess.run(argv, cwd=scratch, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TRITON_INTERPRET": "1"}, **options)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["right"] and out["report"]["isolation_seccomp"].startswith("filter")
