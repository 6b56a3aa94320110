"""The shared arena between judge and runner: copies in and out are exact snapshots, and on a
GPU the mapping is page-locked (DMA copies), with pageable copies where it cannot be."""

from __future__ import annotations

import pytest
import torch

from kernelswarm.evaluators.protocol import layout
from kernelswarm.evaluators.shared_memory import Arena, describe


def _round_trip(arena: Arena, device: str) -> None:
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
