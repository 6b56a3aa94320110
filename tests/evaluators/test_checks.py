"""The correctness comparisons the sandbox applies, on hand-made tensors."""

from __future__ import annotations

import math

import torch

from kernelswarm.evaluators.correctness import FIRST_POISON, compare, first_bit_difference, poison
from kernelswarm.search import Tolerance

TOL = Tolerance(atol=1e-5, rtol=1e-5)


def _compare(out, ref):
    return compare([torch.tensor(out)], [torch.tensor(ref)], lambda dtype: TOL)


def test_within_tolerance_passes_and_reports_the_error():
    result = _compare([1.0, 2.0 + 1e-6], [1.0, 2.0])
    assert result.mismatch is None and 0 < result.max_abs_err < 2e-6


def test_outside_tolerance_names_the_first_bad_index():
    result = _compare([1.0, 2.1, 3.5], [1.0, 2.0, 3.0])
    assert result.mismatch.index == (1,) and result.mismatch.bad == 2
    assert result.max_abs_err == 0.5


def test_nan_and_inf_must_sit_where_the_reference_has_them():
    assert _compare([math.nan, math.inf], [math.nan, math.inf]).mismatch is None
    assert _compare([1.0, math.inf], [math.nan, math.inf]).mismatch.index == (0,)
    assert _compare([0.0, -math.inf], [0.0, math.inf]).mismatch.index == (1,)


def test_unwritten_outputs_show_as_poison():
    out = torch.empty(4)
    poison([out], FIRST_POISON)
    out[:2] = 1.0
    result = compare([out], [torch.ones(4)], lambda dtype: TOL)
    assert result.mismatch.unwritten == 2 and "did not write them" in result.mismatch.describe()


def test_integer_outputs_must_match_exactly():
    result = compare([torch.tensor([1, 2, 4])], [torch.tensor([1, 2, 3])],
                     lambda dtype: (_ for _ in ()).throw(AssertionError("no tolerance needed")))
    assert result.mismatch.index == (2,)


def test_input_check_is_bit_for_bit():
    before = [torch.tensor([[0.0, 1.0], [2.0, math.nan]])]
    assert first_bit_difference(before, [before[0].clone()]) is None  # NaN == NaN in bits
    changed = before[0].clone()
    changed[1, 0] = 2.0000002
    assert first_bit_difference(before, [changed]).index == (1, 0)
    signed = before[0].clone()
    signed[0, 0] = -0.0
    assert first_bit_difference(before, [signed]).index == (0, 0)
