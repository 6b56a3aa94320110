"""The shared arena between judge and runner: copies in and out are exact snapshots, every kind
of arena refuses a copy outside it or unlike its spec, and on a GPU the mapping is page-locked
(DMA copies), with pageable copies where it cannot be."""

from __future__ import annotations

import pytest
import torch

from kernelswarm.evaluators.measure.shared_memory import Arena, ArenaError, BaseArena, describe
from kernelswarm.evaluators.protocol import TensorSpec, layout


def _round_trip(arena: BaseArena, device: str) -> None:
    tensors = (torch.randn(37, 129, device=device).to(torch.bfloat16),
               torch.arange(1001, device=device, dtype=torch.int32))
    specs, end = layout(describe(tensors))
    assert end <= arena.size
    for spec, tensor in zip(specs, tensors, strict=True):
        arena.write(spec, tensor)
    back = [arena.read(spec, device) for spec in specs]
    for spec, tensor, copy in zip(specs, tensors, back, strict=True):
        assert torch.equal(copy, tensor)
        arena.write(spec, torch.zeros_like(tensor))  # the copy read before is a snapshot
        assert torch.equal(copy, tensor)
        target = torch.empty_like(tensor)
        arena.copy_into(spec, target)
        assert not target.any()


def test_without_cuda_the_arena_stays_pageable_and_copies_are_exact():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the GPU test covers pinning")
    arena = Arena.create(1 << 20, pin=True)
    try:
        assert not arena.pinned and arena.pin() is False
        _round_trip(arena, "cpu")
    finally:
        arena.close()


@pytest.mark.gpu
def test_on_a_gpu_the_arena_is_page_locked_and_copies_are_exact():
    arena = Arena.create(8 << 20)
    try:
        assert arena.pin() and arena.pinned and arena.pin()
        _round_trip(arena, "cuda")
        _round_trip(arena, "cpu")
    finally:
        arena.close()
    assert not arena.pinned
    # Unregistered: the same pages can be registered again by a new mapping of a new arena.
    again = Arena.create(8 << 20, pin=True)
    try:
        assert again.pinned
    finally:
        again.close()


def _made(kind: str) -> tuple[BaseArena, str]:
    """A new arena of ``kind`` and the device its tensors are on."""
    if kind == "host":
        return Arena.create(1 << 16), "cpu"
    from kernelswarm.evaluators.measure.device_arena import DeviceArena

    return DeviceArena.create(1 << 16, "cuda"), "cuda"


@pytest.mark.parametrize("kind", ["host", pytest.param("device", marks=pytest.mark.gpu)])
def test_every_arena_refuses_a_copy_outside_it_or_unlike_its_spec(kind):
    """A runner's reply names the specs the judge reads: one that lies outside the arena, or a
    tensor that is not what its spec says, is an ``ArenaError`` on either kind of arena, never a
    read of other memory."""
    arena, device = _made(kind)
    try:
        four = torch.arange(4, dtype=torch.float32, device=device)
        beyond = TensorSpec(arena.size - 8, "float32", (4,), 4)
        for copy in (lambda: arena.write(beyond, four), lambda: arena.read(beyond, device),
                     lambda: arena.read(TensorSpec(-4, "float32", (4,), 4), device),
                     lambda: arena.copy_into(beyond, torch.empty_like(four))):
            with pytest.raises(ArenaError, match="does not fit the arena"):
                copy()
        spec = TensorSpec(0, "float32", (4,), 4)
        for unlike in (four.double(), four.reshape(2, 2)):
            with pytest.raises(ArenaError, match="where float32 \\[4\\] was expected"):
                arena.write(spec, unlike)
        with pytest.raises(ArenaError, match="unknown dtype"):
            arena.read(TensorSpec(0, "float_and_a_half", (4,), 4), device)
        arena.write(spec, four)
        assert torch.equal(arena.read(spec, device), four)
        wider = torch.empty(4, dtype=torch.float64, device=device)
        arena.copy_into(spec, wider)  # a tensor unlike the spec gets the values converted
        assert torch.equal(wider, four.double())
    finally:
        arena.close()


_ATTACH_CHILD = """
import os, sys, torch
from kernelswarm.evaluators.measure.device_arena import DeviceArena
from kernelswarm.evaluators.protocol import TensorSpec
fd, size, mapped = (int(v) for v in sys.argv[1:4])
arena = DeviceArena.attach(fd, size, mapped, "cuda")
spec = TensorSpec(0, "int32", (1001,), 4)
seen = arena.read(spec, "cuda")
arena.write(spec, seen * 2)  # the judge sees this once the runner has settled
arena.settle()
print(int(seen.sum()))
"""


@pytest.mark.gpu
def test_the_device_arena_is_shared_by_descriptor_with_another_process(tmp_path):
    import subprocess
    import sys

    from kernelswarm.evaluators.measure.device_arena import DeviceArena
    from kernelswarm.evaluators.protocol import TensorSpec

    arena = DeviceArena.create(8 << 20, "cuda")
    try:
        _round_trip(arena, "cuda")
        spec = TensorSpec(0, "int32", (1001,), 4)
        arena.write(spec, torch.arange(1001, device="cuda", dtype=torch.int32))
        arena.settle()
        described = arena.describe()
        child = subprocess.run(
            [sys.executable, "-c", _ATTACH_CHILD, str(arena.fd), str(described["bytes"]),
             str(described["mapped"])], pass_fds=(arena.fd,), capture_output=True, text=True,
            timeout=120)
        assert child.returncode == 0, child.stderr[-2000:]
        assert child.stdout.split()[-1] == str(sum(range(1001)))
        assert torch.equal(arena.read(spec, "cuda"),
                           2 * torch.arange(1001, device="cuda", dtype=torch.int32))
    finally:
        arena.close()


def test_where_no_device_arena_can_be_made_the_host_arena_serves_and_says_why(monkeypatch):
    from kernelswarm.evaluators.measure import device_arena

    monkeypatch.setattr(device_arena, "_refused", {})
    arena = device_arena.evaluation_arena(1 << 16, "cpu")
    try:
        assert arena.kind == "host" and device_arena.arena_refusal("cpu") == ""
    finally:
        arena.close()
    monkeypatch.setenv(device_arena.ARENA_ENV, "0")
    arena = device_arena.evaluation_arena(1 << 16, "cuda")
    try:
        assert arena.kind == "host"
        assert device_arena.arena_refusal("cuda") == f"{device_arena.ARENA_ENV}=0"
    finally:
        arena.close()
    if torch.cuda.is_available():
        return
    monkeypatch.delenv(device_arena.ARENA_ENV)
    arena = device_arena.evaluation_arena(1 << 16, "cuda")  # no GPU here: the driver refuses
    try:
        assert arena.kind == "host"
        assert device_arena.arena_refusal("cuda")  # the reason, for the evaluation's metrics
    finally:
        arena.close()
