"""Outputs compared a chunk at a time (the temporaries of a comparison stay small however large
a KernelBench output is): the verdict, the errors, the first mismatch, its counts and the first
changed input are those of comparing whole."""

from __future__ import annotations

import math

import pytest
import torch

from kernelswarm.evaluators import correctness
from kernelswarm.evaluators.correctness import compare, first_bit_difference
from kernelswarm.search.task import Tolerance


def _tolerance(dtype: str) -> Tolerance:
    return Tolerance(1e-2, 1e-2)


def _outputs() -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    torch.manual_seed(0)
    reference = [torch.randn(37, 53), torch.randn(1000), torch.randint(0, 9, (64,))]
    outputs = [t.clone() for t in reference]
    outputs[0] += 1e-3 * torch.randn(37, 53)  # within tolerance everywhere
    outputs[1][[17, 401, 999]] += 5.0  # wrong in three places, in different chunks
    outputs[1][600] = float("nan")  # left unwritten (the poison)
    reference[1][900] = float("inf")
    outputs[1][900] = float("inf")  # the same infinity: right
    return outputs, reference


@pytest.mark.parametrize("chunk", [7, 64, 1 << 24])
def test_a_chunked_comparison_is_the_comparison_of_the_whole(monkeypatch, chunk):
    outputs, reference = _outputs()
    whole = compare(outputs, reference, _tolerance)
    monkeypatch.setattr(correctness, "CHUNK_ELEMENTS", chunk)
    chunked = compare(outputs, reference, _tolerance)
    assert chunked == whole
    mismatch = chunked.mismatch
    assert mismatch is not None and mismatch.tensor == 1 and mismatch.index == (17,)
    assert (mismatch.bad, mismatch.unwritten, mismatch.total) == (4, 1, 1000)
    assert math.isinf(chunked.max_abs_err)  # a NaN where the reference has none


@pytest.mark.parametrize("chunk", [3, 1 << 24])
def test_the_first_changed_input_is_found_in_any_chunk(monkeypatch, chunk):
    monkeypatch.setattr(correctness, "CHUNK_ELEMENTS", chunk)
    before = [torch.arange(10, dtype=torch.float32), torch.arange(300, dtype=torch.float32)]
    after = [t.clone() for t in before]
    assert first_bit_difference(before, after) is None
    after[1][211] = -1.0
    found = first_bit_difference(before, after)
    assert found is not None and (found.tensor, found.index) == (1, (211,))
