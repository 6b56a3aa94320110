"""Kernel structures for cuda (agents/builtin/cuda_structures.py): where each applies, that it
builds with NVRTC at the knob settings that take each of its paths, that the launchers launch it
as it needs (a recording stand-in for ``fn`` on the CPU), and, on a GPU, that the real
evaluator finds it correct on every tuning and held-out shape, odd sizes included."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from kernelswarm.agents import TRANSFORMATIONS
from kernelswarm.agents.builtin.cuda_structures import MARKER, Stream, WarpRows
from kernelswarm.evaluators.languages.cuda_device import DeviceFigures
from kernelswarm.search import Candidate, Status, load_task
from tests.agents.test_cuda_transforms import TASKS, build, needs_nvrtc, rewrite, start_of

__all__ = ["build"]  # the NVRTC build fixture, shared with the micro-rewrites' tests

LIB = TRANSFORMATIONS["cuda"]
STRUCTURES = {"fused_add_rmsnorm": "warp_rows", "silu_and_mul": "stream"}
# Settings that take each path: single pass in registers, two passes (ITEMS too small for the
# row), narrow vectors, one warp per block; grids of one wave and of several.
SETTINGS = {
    "fused_add_rmsnorm": [{"ROWS": 4, "VEC": 8, "ITEMS": 16}, {"ROWS": 1, "VEC": 8, "ITEMS": 32},
                          {"ROWS": 16, "VEC": 8, "ITEMS": 4}, {"ROWS": 2, "VEC": 2, "ITEMS": 8}],
    "silu_and_mul": [{"BLOCK": 256, "WAVES": 2}, {"BLOCK": 1024, "WAVES": 1},
                     {"BLOCK": 128, "WAVES": 8}],
}


def structured(task: str, knobs: dict | None = None) -> Candidate:
    child = rewrite(start_of(task), STRUCTURES[task])
    return child.derive(knobs=knobs) if knobs else child


def h100(sm_count: int = 132) -> DeviceFigures:
    return DeviceFigures(ordinal=0, sm_count=sm_count, l2_bytes=50 << 20,
                         max_threads_per_sm=2048, shared_bytes_per_sm=228 << 10,
                         registers_per_sm=65536, warp_size=32)


class Launch:
    """Stands in for the cuda ``fn``: records the geometry and the trailing int arguments."""

    def __init__(self, knobs: dict, device: DeviceFigures, registers: int = 32) -> None:
        self.knobs, self.device, self.registers, self.calls = knobs, device, registers, []

    def kernel(self, name: str) -> Launch:
        return self

    def __call__(self, grid, block, *args) -> None:
        self.calls.append((grid, block, args[-1]))


def launched(task: str, shape: dict, fn: Launch):
    module = load_task(TASKS / task, "cuda").module
    module.launch_cuda(fn, module.make_inputs(shape, 0, "cpu"), module.make_outputs(shape, "cpu"),
                       shape)
    return fn.calls[0]


def test_each_structure_applies_to_its_contract_only_and_once():
    for task in ("silu_and_mul", "fused_add_rmsnorm", "merge_attn_states_lse", "softmax", "gemm"):
        start = start_of(task)
        applies = {n for n in ("warp_rows", "stream") if LIB[n].apply(start.source, start.space)}
        assert applies == ({STRUCTURES[task]} if task in STRUCTURES else set())
    for task, name in STRUCTURES.items():
        child = structured(task)
        assert MARKER in child.source and LIB[name].apply(child.source, child.space) is None
    assert isinstance(LIB["warp_rows"], WarpRows) and isinstance(LIB["stream"], Stream)


def test_the_rmsnorm_launcher_gives_a_warp_per_row_and_passes_the_row_count():
    shape = {"tokens": 333, "hidden": 5120, "dtype": "float16"}
    grid, block, rows = launched("fused_add_rmsnorm", shape, Launch({"ROWS": 8}, h100()))
    assert (grid, block, rows) == (42, (32, 8), 333)


@pytest.mark.parametrize("sm_count, waves, shape, grid", [
    (132, 2, {"tokens": 4096, "d": 14336, "dtype": "bfloat16"}, 2 * 8 * 132),
    (16, 1, {"tokens": 4096, "d": 14336, "dtype": "bfloat16"}, 8 * 16),
    (132, 8, {"tokens": 1, "d": 11008, "dtype": "bfloat16"}, 6),  # fewer chunks than the GPU holds
])
def test_the_silu_launcher_sizes_the_stream_grid_to_the_gpu(sm_count, waves, shape, grid):
    fn = Launch({"BLOCK": 256, "WAVES": waves}, h100(sm_count))
    assert launched("silu_and_mul", shape, fn) == (grid, 256, shape["tokens"])


@needs_nvrtc
@pytest.mark.parametrize("task", sorted(STRUCTURES))
def test_each_structure_builds_on_every_path(task, build):
    for knobs in SETTINGS[task]:
        build(task, structured(task, knobs))


@needs_nvrtc
@pytest.mark.parametrize("task", sorted(STRUCTURES))
def test_micro_rewrites_on_a_structure_decline_or_build(task, build):
    base = structured(task)
    for name, transformation in LIB.items():
        if transformation.apply(base.source, base.space) is not None:
            build(task, rewrite(base, name))



@pytest.mark.gpu
@pytest.mark.parametrize("task, knobs", [(t, k) for t, ks in SETTINGS.items() for k in ks])
def test_each_structure_is_correct_on_every_shape_on_the_gpu(task, knobs, cuda_evaluate):
    verdict = cuda_evaluate(task, structured(task, knobs))
    assert verdict.status is Status.OK, f"{task} {knobs}: {verdict.message}"
    assert verdict.shapes and all(s.correct for s in verdict.shapes)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("task", sorted(STRUCTURES))
def test_each_structure_compiles_with_nvcc_too(task, tmp_path):
    # The evaluator builds with NVRTC; nvcc is the compiler users build the file with.
    (tmp_path / "kernel.cu").write_text(structured(task).source)
    for knobs in SETTINGS[task][:2]:
        defines = [f"-D{k}={v}" for k, v in knobs.items()]
        built = subprocess.run(["nvcc", "-arch=sm_90", "-std=c++17", "--cubin", *defines,
                                "kernel.cu", "-o", "kernel.cubin"], cwd=tmp_path,
                               capture_output=True, text=True, timeout=300)
        assert built.returncode == 0, built.stderr[-2000:]
