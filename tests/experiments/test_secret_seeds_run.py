"""A real CPU run (Ray, g++, the sandbox, Parquet) whose fastest kernel is right only on the
inputs the search checks with: it passes every evaluation of the search, and its confirmation,
checked on secret seeds, finds it wrong; the next kernel is reported as the best.

The cheat is wrong only on the held-out shapes, which are never timed: a kernel wrong on unseen
inputs of a tuning shape already fails the search's own evaluation, its timed copies being
drawn from a secret (tests/evaluators/test_secret_seeds.py shows both)."""

from __future__ import annotations

import io
import json
import sys
from dataclasses import replace

import pytest
import ray
import ray.cloudpickle
from rich.console import Console

from kernelswarm.agents import builtin_roles
from kernelswarm.experiments.config import load_config
from kernelswarm.experiments.run.execute import run
from kernelswarm.search import CHECK_SEEDS, Coder, Origin, Roles, Status, load_task
from tests.conftest import SILU_TASK
from tests.evaluators.fixed_seed_kernels import fixed_seed_kernel

pytestmark = pytest.mark.slow

SEEDS = 3  # evaluator.seeds, the configuration's default

# An honest kernel, slower than the cheat: the task's unrolled example, unrolled by 2.
HONEST = (SILU_TASK / "silu_and_mul_unroll.cpp").read_text().replace(
    "#define UNROLL 1 ", "#define UNROLL 2 ")


class _Scripted(Coder):
    """Proposes the cheat, then the honest kernel."""

    def __init__(self, sources: list[str]) -> None:
        self.queue = list(sources)

    def code(self, plan, parent, view):
        return parent.derive(source=self.queue.pop(0), origin=Origin(role="coder", move=plan.move))


def _roles(cheat: str):
    def make(seed: int) -> Roles:
        return replace(builtin_roles(seed), coder=_Scripted([cheat, HONEST]))
    return make


# Ray workers cannot import this test module: ship the roles factory's code with it.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_a_kernel_right_only_on_the_searchs_seeds_is_not_reported_as_best(
        tmp_path, compile_cache, ray_session):
    assert "#define UNROLL 2 " in HONEST
    task = load_task(SILU_TASK, "cpu")
    cheat = fixed_seed_kernel(task, SEEDS, task.heldout_shapes)
    config = load_config(None, [
        f'run.out_dir="{tmp_path / "runs"}"', "run.name=secret", "search.lineages=1",
        "search.candidates_per_lineage=2", "search.wall_time_s=600", "search.confirm_top=2",
        "search.confirm_repeats=1", f"evaluator.seeds={SEEDS}", "tracking.mlflow=false",
        f'evaluator.cache_dir="{compile_cache}"',
        "timing.budget_s=0.05", "timing.min_repeats=5", "timing.max_repeats=30"])
    console = Console(file=io.StringIO(), width=160)
    outcome = run(config, console, make_roles=_roles(cheat))

    confirmation = outcome.result.confirmation
    assert confirmation is not None and confirmation.seeds is not None
    kernels = {k.candidate.source: k for k in confirmation.kernels}
    assert set(kernels) == {cheat, HONEST}, "both kernels are the search's best two"
    cheated, honest = kernels[cheat], kernels[HONEST]
    # The search judged the cheat OK, on its own seeds, and found it the fastest
    assert cheated.found.status is Status.OK, cheated.found.message
    assert cheated.found.metrics[CHECK_SEEDS] == list(range(SEEDS))
    assert cheated.found.speedup > honest.found.speedup
    # Judged again on secret seeds, it is wrong on a held-out shape; the honest kernel holds
    secret = confirmation.seeds.values
    assert len(secret) == SEEDS and not set(secret) & set(range(SEEDS))
    (repeat,) = cheated.repeats
    assert repeat.status is Status.INCORRECT and "held-out shape" in repeat.message
    assert secret == tuple(repeat.metrics[CHECK_SEEDS])
    assert honest.ok and confirmation.seeds.checked(honest.repeats[0])
    assert confirmation.chosen is honest

    summary = json.loads((outcome.run_dir / "summary.json").read_text())
    assert summary["best"]["candidate_id"] == honest.candidate.id
    assert summary["best"]["confirmed"] and summary["best"]["secret_seeds"] == SEEDS
    assert summary["confirmation"]["secret_seeds"] == list(secret)
    failed = next(k for k in summary["confirmation"]["kernels"]
                  if k["candidate_id"] == cheated.candidate.id)
    assert failed["failure"].startswith("INCORRECT") and "held-out" in failed["failure"]
    assert outcome.best_path.read_text().endswith(HONEST)
    text = console.file.getvalue()  # the closing lines say what was checked, and who is out
    assert f"correctness on {SEEDS} secret seeds" in text
    assert f"out: {cheated.candidate.id}: INCORRECT" in text
    report = (outcome.run_dir / "report" / "report.md").read_text()
    assert f"on {SEEDS} secret seeds" in report and str(secret[0]) in report
