"""A timed call must do the work: the judge's side of it, on the CPU.

The runner fingerprints the outputs of the copies it returns right after their timed call (on a
GPU, before the device-wide synchronize) and the judge compares them with what it reads back
(deferred work is REJECTED); the wall-time check keeps a floor of its own on small shapes (half
the machine's launch floor). The runner's half (every copy poisoned before every
graph replay) and the adversarial kernels run on a GPU: tests/evaluators/adversarial/test_gpu.py.
"""

from __future__ import annotations

import math

import pytest
import torch

from kernelswarm.evaluators import EvaluatorSettings
from kernelswarm.evaluators.correctness import fingerprint
from kernelswarm.evaluators.judge.figures import LAUNCH_FLOOR_SHARE, own_floor_us
from kernelswarm.evaluators.judge.timing import (
    BurstFigures,
    ShapeTimer,
    TimingDisagreement,
    _deferred,
)
from kernelswarm.evaluators.judge.trial import CandidateFault
from kernelswarm.evaluators.measure.timing import TimingStats
from kernelswarm.search import MachineFigures, Shape, Status

SHAPE = Shape.of({"tokens": 1, "d": 11008})


def _stats(median_us: float) -> TimingStats:
    return TimingStats(median_us, 0.1, 50, 0.001)


def test_a_fingerprint_follows_the_bytes_not_where_they_lie():
    base = torch.randn(4, 6, dtype=torch.float32).to(torch.bfloat16)
    unaligned = base.view(-1)[1:9]  # two bytes into its storage
    assert fingerprint([unaligned]).tolist() == fingerprint([unaligned.clone()]).tolist()
    odd = torch.arange(3, dtype=torch.uint8)  # a size that is no multiple of four: byte sums
    assert fingerprint([odd]).tolist() == [3]
    changed = base.clone()
    changed[2, 3] = changed[2, 3] + 1
    figures = fingerprint([base, changed, torch.ones(5, dtype=torch.bool)]).tolist()
    assert len(figures) == 3 and figures[0] != figures[1]
    # a poisoned buffer and the same buffer once computed differ
    poisoned = torch.full((8,), math.nan)
    assert fingerprint([poisoned]).tolist() != fingerprint([torch.zeros(8)]).tolist()


def _returned(outputs: tuple[torch.Tensor, ...]) -> list[tuple[int, int, tuple, tuple]]:
    return [(3, 17, outputs, ())]


def test_outputs_that_changed_after_the_timed_call_are_deferred_work():
    out = torch.randn(2, 8)
    right_after = fingerprint([out]).tolist()
    _deferred({"fingerprints": {"3": right_after}}, _returned((out,)), SHAPE)  # unchanged: fine
    out[1, 5] += 1.0  # written once the timed call had returned
    with pytest.raises(CandidateFault) as caught:
        _deferred({"fingerprints": {"3": right_after}}, _returned((out,)), SHAPE)
    assert caught.value.status is Status.REJECTED
    assert f"deferred work on shape {SHAPE.label}" in str(caught.value)
    assert "output 0 of timed copy 3" in str(caught.value)


@pytest.mark.parametrize("reply", [{}, {"fingerprints": {}}, {"fingerprints": {"3": [True]}},
                                   {"fingerprints": {"3": [1, 2]}}], ids=str)
def test_a_batch_without_its_fingerprints_is_malformed(reply):
    with pytest.raises(CandidateFault) as caught:
        _deferred(reply, _returned((torch.zeros(4),)), SHAPE)
    assert caught.value.status is Status.RUNTIME_ERROR
    assert "malformed reply from the runner" in str(caught.value)


def _gpu(launch_floor_us: float = 2.0) -> MachineFigures:
    return MachineFigures("cuda: H200", 60 << 20, 4000.0, 900_000.0, launch_floor_us=launch_floor_us)


def test_the_own_floor_is_half_the_machines_launch_floor():
    assert own_floor_us(_gpu(2.0)) == pytest.approx(2.0 * LAUNCH_FLOOR_SHARE)
    assert own_floor_us(_gpu(math.nan)) == 0.0  # not measured (the CPU): no floor of its own
    assert own_floor_us(MachineFigures("cpu: x", 1, 1.0, 1.0)) == 0.0


def _timer() -> ShapeTimer:
    # only the settings are used by the cross-check (the CPU's: no GPU here)
    return ShapeTimer(None, None, None, None, EvaluatorSettings(device="cpu"))  # type: ignore


def test_the_wall_time_check_keeps_its_force_on_a_shape_of_a_few_microseconds():
    # a 6 us start whose bursts cannot tell the kernels apart: the floor from the bursts is
    # below zero (6 x 1.0 x 0.5 less the slack); the shape's own floor of 1 us still holds
    bursts = BurstFigures(candidate_us=9.0, start_us=9.0, noise_us=4.0)
    _timer()._cross_check(SHAPE, bursts, (_stats(1.2), _stats(6.0)), True, 1.0)
    with pytest.raises(TimingDisagreement) as caught:
        _timer()._cross_check(SHAPE, bursts, (_stats(0.3), _stats(6.0)), True, 1.0)
    assert caught.value.status is Status.REJECTED
    assert "no call of this shape takes less than 1.00 us" in str(caught.value)
    # without clean figures of the start, the shape's own floor is the check
    with pytest.raises(TimingDisagreement):
        _timer()._cross_check(SHAPE, bursts, (_stats(0.3), _stats(6.0)), False, 1.0)


def test_the_launch_floor_is_stored_only_where_it_was_measured():
    assert "launch_floor_us" not in MachineFigures("cpu: x", 1, 1.0, 1.0).as_metrics()
    stored = _gpu(1.7).as_metrics()
    assert stored["launch_floor_us"] == 1.7
    assert MachineFigures.parse(stored) == _gpu(1.7)


def test_poisoning_every_copy_at_once_leaves_what_poison_leaves():
    from kernelswarm.evaluators.correctness import poison, poison_all
    from kernelswarm.evaluators.protocol import FIRST_POISON

    def copies():
        return [(torch.randn(3), torch.arange(4, dtype=torch.int32)),
                (torch.randn(2).to(torch.bfloat16), torch.zeros(2, dtype=torch.bool)),
                (torch.full((2,), math.inf), torch.arange(1, dtype=torch.int64))]

    together, one_by_one = copies(), copies()
    poison_all(together)
    for outputs in one_by_one:
        poison(outputs, FIRST_POISON)
    for mine, theirs in zip(together, one_by_one, strict=True):
        for a, b in zip(mine, theirs, strict=True):
            assert a.dtype == b.dtype
            assert torch.equal(a.isnan(), b.isnan()) if a.is_floating_point() else torch.equal(a, b)
            assert not a.is_floating_point() or bool(a.isnan().all())
