"""The cuda transformations on a real GPU: every rewrite of the suite's starting kernels, alone and
composed, at its first knob values and at tuned geometry, is correct on every tuning and held-out
shape under the real evaluator. Marked ``gpu``: skipped where no GPU is visible."""

from __future__ import annotations

import pytest

from kernelswarm.search import Status
from tests.agents.test_cuda_transforms import APPLIES, compose

pytestmark = pytest.mark.gpu

SUITE = ("silu_and_mul", "fused_add_rmsnorm", "merge_attn_states_lse")
# Settings a tuner would reach: wide vectors, and the geometry knobs away from their defaults.
TUNED = {
    "silu_and_mul": {"BLOCK": 128, "VEC": 8, "SPLIT": 64, "KS_UNROLL": 2},
    "fused_add_rmsnorm": {"BLOCK": 1024, "VEC": 8, "KS_UNROLL": 2},
    "merge_attn_states_lse": {"BLOCK": 32, "VEC": 8, "ROWS": 16, "KS_UNROLL": 2},
}



def _assert_ok(evaluation, what: str) -> None:
    speedups = {s.shape: round(s.speedup_vs_start, 2) for s in evaluation.shapes}
    assert evaluation.status is Status.OK, f"{what}: {evaluation.message}"
    assert evaluation.shapes and all(s.correct for s in evaluation.shapes), (what, speedups)


@pytest.mark.parametrize("task, name", sorted((t, n) for t in SUITE for n in APPLIES[t]))
def test_each_transformation_alone_is_correct_on_every_shape(task, name, cuda_evaluate):
    child = compose(task, [name])
    _assert_ok(cuda_evaluate(task, child), f"{task} {name} {child.knob_values}")


@pytest.mark.parametrize("task", SUITE)
def test_all_transformations_composed_are_correct_at_first_and_tuned_knobs(task, cuda_evaluate):
    from kernelswarm.agents import transformations_for

    names = [t.name for t in transformations_for("cuda") if t.name in APPLIES[task]]
    composed = compose(task, names)
    _assert_ok(cuda_evaluate(task, composed), f"{task} composed {composed.knob_values}")
    tuned = composed.derive(knobs=TUNED[task])
    evaluation = cuda_evaluate(task, tuned)
    _assert_ok(evaluation, f"{task} tuned {tuned.knob_values}")
    assert evaluation.speedup > 1.0, {s.shape: round(s.speedup_vs_start, 2)
                                      for s in evaluation.shapes}
