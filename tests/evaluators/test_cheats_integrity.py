"""The sandbox's run-time integrity checks, on plain functions standing in for a kernel's call."""

from __future__ import annotations

import time

import pytest
import torch

from kernelswarm.evaluators.runner.integrity import (
    ComputeGuard,
    IntegrityViolation,
    ProcessSnapshot,
    checked_entry,
    guarded_call,
    replaced_timers,
)


def _tensors() -> tuple[tuple[torch.Tensor], tuple[torch.Tensor]]:
    return (torch.randn(4, 8),), (torch.empty(4, 4),)


def test_allocation_and_views_are_allowed_compute_is_named():
    x = torch.randn(4, 8)
    with ComputeGuard() as guard:
        scratch = torch.empty_like(x)
        torch.zeros(3).zero_()
        x[:2].reshape(16).view(4, 4).t().unsqueeze(0)
        x[:, :4].select(0, 1)
        scratch.fill_(1.0)
    assert guard.verdict() is None
    with ComputeGuard() as guard:
        torch.sigmoid(x)
        _ = x * 2
    verdict = guard.verdict()
    assert verdict is not None and verdict.startswith("calls PyTorch compute (aten::sigmoid at")
    assert "test_cheats_integrity.py" in verdict and "also aten::mul.Tensor" in verdict


def test_compute_on_the_kernels_own_line_is_located():
    with ComputeGuard(source_file=__file__) as guard:
        torch.ones(2).add_(1)
    assert f"line {test_compute_on_the_kernels_own_line_is_located.__code__.co_firstlineno + 2}" \
        " of the kernel" in guard.verdict()


def test_guarded_call_finds_compute_rebound_outputs_and_subclasses():
    inputs, outputs = _tensors()
    assert guarded_call(lambda: outputs[0].copy_(inputs[0][:, :4]), inputs, outputs,
                        host_code=True).startswith("calls PyTorch compute (aten::copy_")
    inputs, outputs = _tensors()

    def rebind() -> None:
        outputs[0].data = torch.zeros(4, 4)

    assert "rebound output 0" in guarded_call(rebind, inputs, outputs, host_code=True)

    class Lazy(torch.Tensor):
        pass

    inputs, outputs = _tensors()

    def subclass() -> None:
        outputs[0].__class__ = Lazy

    assert "replaced output 0 by a Lazy" in guarded_call(subclass, inputs, outputs,
                                                         host_code=True)
    inputs, outputs = _tensors()
    assert guarded_call(lambda: None, inputs, outputs, host_code=True) is None


def test_a_returned_tensor_is_refused_unless_it_is_an_output():
    out = torch.empty(2)
    checked_entry(lambda o: None)(out)
    checked_entry(lambda o: o)(out)
    checked_entry(lambda o: (o, 3))(out)
    with pytest.raises(IntegrityViolation, match="returned a Tensor that is not one of its"):
        checked_entry(lambda o: o + 1)(out)
    with pytest.raises(IntegrityViolation, match="returned a Tensor"):
        checked_entry(lambda o: {"y": torch.zeros(1)})(out)


def test_replaced_timers_are_found(monkeypatch):
    assert replaced_timers() is None
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    assert replaced_timers().startswith("replaced time.perf_counter:")
    monkeypatch.undo()
    monkeypatch.setattr(torch.cuda.Event, "elapsed_time", lambda self, end: 0.0)
    assert "replaced torch.cuda.Event.elapsed_time" in replaced_timers()
    monkeypatch.undo()
    assert replaced_timers() is None
    inputs, outputs = _tensors()

    def slow_the_clock() -> None:
        monkeypatch.setattr(time, "perf_counter_ns", lambda: 0)

    assert "perf_counter_ns" in guarded_call(slow_the_clock, inputs, outputs, host_code=False)


def test_a_patched_function_of_torch_or_the_evaluator_is_found(monkeypatch):
    import kernelswarm.evaluators.correctness as correctness

    snapshot = ProcessSnapshot()
    assert snapshot.changed() is None
    monkeypatch.setattr(torch.Tensor, "isnan", lambda self: torch.zeros_like(self).bool())
    assert "replaced torch.Tensor.isnan" in snapshot.changed()
    monkeypatch.undo()
    monkeypatch.setattr(correctness, "compare", lambda *args: None)
    assert "replaced kernelswarm.evaluators.correctness.compare" in snapshot.changed()
    monkeypatch.undo()
    assert snapshot.changed() is None


def test_a_shadowing_method_is_found_beside_a_removed_attribute_and_after_a_harmless_one(
        monkeypatch):
    """The check compares whole namespaces first (names and values); a name removed beside
    the one added keeps a class's size, and an attribute that replaces nothing (a module
    gaining one) must not blind the checks after it."""
    snapshot = ProcessSnapshot()
    monkeypatch.setattr(torch.Tensor, "harmless_marker", 1, raising=False)
    assert snapshot.changed() is None  # nothing the judge relies on changed
    monkeypatch.delattr(torch.Tensor, "harmless_marker")
    monkeypatch.setattr(torch.Tensor, "isfinite", lambda self: torch.ones_like(self).bool())
    assert "replaced torch.Tensor.isfinite" in snapshot.changed()
    monkeypatch.undo()
    assert snapshot.changed() is None
