"""What making a shape's timed copies costs a runner, pinned where it can be seen on the CPU.

On an H200 every cuda runner once spent 2-3 s on its first timed shape: its copies were
allocated with ``torch.empty_like`` of a tensor on the ``meta`` device, whose first use onto
another device imports several hundred modules (sympy among them). The copies now come from a
plain ``Layout``; these tests fail if a copy's allocation starts importing again, or if the
layout drifts from what ``empty_like`` of the draw would give. And memory goes back to the
device between shapes only on a problem of a GiB or more (handing it back on every shape cost
each shape a round of cudaFree and cudaMalloc).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from kernelswarm.evaluators.judge.references import release_device_memory
from kernelswarm.evaluators.protocol import (
    CANDIDATE,
    KERNELS,
    RELEASE_ABOVE_BYTES,
    release_due,
    timing_seed,
)
from kernelswarm.evaluators.runner import timed
from kernelswarm.evaluators.runner.session import Session
from kernelswarm.evaluators.runner.timed import DRAWN_COPIES, WARM_COPIES, Layout
from kernelswarm.evaluators.settings import EvaluatorSettings
from kernelswarm.search import load_task
from tests.conftest import SILU_TASK

_FRESH = """
import sys, torch
from kernelswarm.evaluators.runner.timed import Layout
x = torch.randn(4, 6)
before = set(sys.modules)
{make}
print(len(set(sys.modules) - before), "sympy" in sys.modules)
"""


def _imports(make: str) -> tuple[int, bool]:
    """(modules imported, sympy among them) by ``make`` in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", _FRESH.format(make=make)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    count, sympy = done.stdout.split()
    return int(count), sympy == "True"


def test_a_copys_buffers_import_nothing_where_a_meta_tensor_imports_sympy():
    assert _imports("Layout.of(x).empty('cpu')") == (0, False)
    # what the runner did before: the first empty_like of a meta tensor onto a device
    count, sympy = _imports("torch.empty_like(torch.empty_like(x, device='meta'), device='cpu')")
    assert count > 100 and sympy


@pytest.mark.parametrize("tensor", [
    torch.randn(3, 5), torch.randn(5, 3).t(), torch.randn(4, 6)[:, :3], torch.randn(1, 7),
    torch.randn(2, 1, 3).expand(2, 4, 3), torch.empty(0, 3), torch.randn(2, 3, 4).permute(2, 0, 1),
    torch.randn(8, dtype=torch.float64)[::2], torch.randn(()).to(torch.bfloat16)])
def test_a_layout_allocates_what_empty_like_would(tensor):
    made, expected = Layout.of(tensor).empty("cpu"), torch.empty_like(tensor)
    assert made.shape == expected.shape and made.dtype == expected.dtype
    assert made.stride() == expected.stride()


def test_memory_goes_back_to_the_device_only_on_problems_of_a_gib():
    assert not release_due(0)
    assert not release_due(4096 * 14336 * 2 * 3)  # silu_and_mul's largest shape: 352 MB
    assert release_due(RELEASE_ABOVE_BYTES) and RELEASE_ABOVE_BYTES == 1 << 30


def test_copies_beyond_the_drawn_ones_repeat_their_draws_as_the_judge_rederives_them(
        monkeypatch):
    """A graph of fast calls holds hundreds of copies; only the first ``DRAWN_COPIES`` of each
    kernel get a draw of their own, the others a device copy of one of those, with its refresh
    index, from which the judge re-derives a returned copy's inputs."""
    session = Session(arena_fd=-1)
    session.task, session.settings = load_task(SILU_TASK), EvaluatorSettings()
    monkeypatch.setattr(timed, "CPU_TIMING_COPIES", 3 * DRAWN_COPIES)
    shape, secret = session.task.tuning_shapes[0], 4242
    timing = timed.ShapeTiming(session, shape, secret)
    assert len(timing.inputs[CANDIDATE]) == WARM_COPIES
    timing.ensure(3 * DRAWN_COPIES)
    for kernel in KERNELS:
        inputs, refreshed = timing.inputs[kernel], timing.refreshed[kernel]
        assert len(inputs) == 3 * DRAWN_COPIES
        assert len({refreshed[c] for c in range(DRAWN_COPIES)}) == DRAWN_COPIES
        for copy in range(len(inputs)):
            assert refreshed[copy] == refreshed[copy % DRAWN_COPIES]
            rederived = session.task.module.make_inputs(
                dict(shape), timing_seed(secret, refreshed[copy]), "cpu")
            assert all(torch.equal(a, b) for a, b in zip(inputs[copy], rederived, strict=True))
            assert all(torch.isnan(t).all() for t in timing.outputs[kernel][copy])
        # each copy has buffers of its own
        assert len({t.data_ptr() for copy in inputs for t in copy}) == len(inputs)


def test_a_small_problems_checked_calls_ask_nothing_of_the_allocator(monkeypatch):
    """Reading the allocator's figures costs milliseconds (a dict of every statistic): asked
    before every checked call, it added 4-7 ms to each on an H200."""
    asked = []
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda *a: asked.append(1) or 0)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *a: 0)
    release_device_memory("cuda", 4096 * 14336 * 2 * 3)
    assert asked == []
    release_device_memory("cuda", 8 << 30)  # a KernelBench-size problem: the room matters
    assert asked == [1]
