"""The GPU's figures reach the launchers: the silu launcher sizes its row split by the SM count
of the GPU it runs on (a recording stand-in for ``fn`` on the CPU), and on a GPU the figures
are the driver's."""

from __future__ import annotations

import pytest
import torch

from kernelswarm.evaluators.languages.cuda_device import DeviceFigures
from kernelswarm.search import load_task
from tests.conftest import SILU_TASK


def figures(sm_count: int) -> DeviceFigures:
    return DeviceFigures(ordinal=0, sm_count=sm_count, l2_bytes=50 << 20,
                         max_threads_per_sm=2048, shared_bytes_per_sm=228 << 10,
                         registers_per_sm=65536, warp_size=32)


class RecordingLaunch:
    """Stands in for the cuda ``fn`` a launcher receives: records the geometry it launches."""

    def __init__(self, knobs: dict, device: DeviceFigures) -> None:
        self.knobs, self.device, self.launches = knobs, device, []

    def kernel(self, name: str) -> RecordingLaunch:
        return self

    def __call__(self, grid, block, *args) -> None:
        self.launches.append((grid, block))


@pytest.mark.parametrize("sm_count, grid", [(132, (64, 9)), (16, 64), (228, (64, 15))])
def test_the_silu_row_split_follows_the_gpus_sm_count(sm_count, grid):
    task = load_task(SILU_TASK, "cuda")
    fn = RecordingLaunch({"BLOCK": 128, "VEC": 1, "SPLIT": 64}, figures(sm_count))
    x, out = torch.empty(1, dtype=torch.bfloat16), torch.empty(1, dtype=torch.bfloat16)
    task.module.launch_cuda(fn, (x,), (out,), {"tokens": 64, "d": 28672, "dtype": "bfloat16"})
    assert fn.launches == [(grid, 128)]


def test_blocks_per_sm_is_limited_by_threads_registers_and_shared_memory():
    h100 = figures(132)
    assert h100.blocks_per_sm(256) == 8
    assert h100.blocks_per_sm(256, registers_per_thread=64) == 4
    assert h100.blocks_per_sm(1024, shared_bytes=200 << 10) == 1
    assert h100.blocks_per_sm(4096) == 1


@pytest.mark.gpu
def test_the_figures_are_the_drivers():
    from kernelswarm.evaluators.languages.cuda_device import device_figures

    props = torch.cuda.get_device_properties(0)
    found = device_figures(0)
    assert found.sm_count == props.multi_processor_count
    assert found.l2_bytes == props.L2_cache_size
    assert found.warp_size == 32
