"""The built-in tester's checks on the suite's tasks."""

from __future__ import annotations

import pytest

from kernelswarm.agents.builtin import RuleTester
from kernelswarm.experiments.config import BUILTIN_TASKS
from kernelswarm.search import load_task

SUITE = ("silu_and_mul", "fused_add_rmsnorm", "merge_attn_states_lse", "softmax", "gemm")


@pytest.mark.parametrize("name", SUITE)
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_checks_cover_size_one_odd_sizes_and_large_values_beyond_the_task(name, device):
    task = load_task(BUILTIN_TASKS / name, device)
    checks = RuleTester().checks(task, "cuda")
    assert len(checks) == 3
    ones, odd, large = checks
    ints = [k for k, v in task.tuning_shapes[0].pairs if isinstance(v, int)]
    assert all(ones.shape[k] == 1 for k in ints)
    assert all(odd.shape[k] % 2 == 1 and odd.shape[k] >= 3 for k in ints)
    assert large.scale > 1.0 and large.shape["dtype"] == odd.shape["dtype"]
    for check in (ones, odd):
        assert check.shape not in [dict(s) for s in (*task.tuning_shapes, *task.heldout_shapes)]


def test_float16_gets_a_scale_it_can_hold(tmp_path):
    task = load_task(BUILTIN_TASKS / "silu_and_mul", "cuda")
    half = task.__class__(**{**task.__dict__, "tuning_shapes": tuple(
        s for s in task.tuning_shapes if s["dtype"] == "float16")})
    (_, _, large) = RuleTester().checks(half, "cuda")
    assert large.scale == 10.0
