"""The suite's cuda and triton starting kernels on a GPU, and the baselines benchmark.

Marked ``gpu``: skipped, with the reason printed, where no GPU is visible. Each starting kernel
goes through the whole evaluation (correctness on every cuda tuning shape, held-out shapes,
timing against itself); the row kernels also at the knob value that changes their geometry
most. The naive gemm may take most of a second a call on the largest shapes, hence the run limit;
it is evaluated at its starting tile only, to keep the suite within a few minutes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks import baselines
from benchmarks.baselines import BUILTIN_TASKS
from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator
from kernelswarm.evaluators.baselines.baselines import COMPILE_ENV
from kernelswarm.search import Status

pytestmark = pytest.mark.gpu

CUDA_TASKS = ("fused_add_rmsnorm", "merge_attn_states_lse", "softmax", "gemm")
TRITON_TASKS = ("fused_add_rmsnorm", "softmax")
# The largest block (a warp for every lane of the final reduction), or fewer threads than the
# head size (merge: two strides over head_dim 128).
OTHER_KNOBS = {"fused_add_rmsnorm": {"BLOCK": 1024}, "merge_attn_states_lse": {"BLOCK": 64},
               "softmax": {"BLOCK": 1024}}


def _settings(cache_dir: Path) -> EvaluatorSettings:
    return EvaluatorSettings(device="cuda", cache_dir=cache_dir, seeds=2, warmup=1,
                             min_repeats=3, max_repeats=20, timing_budget_s=0.1,
                             run_timeout_s=600.0, profile_kernels=False)


@pytest.fixture(scope="module")
def evaluator(compile_cache: Path) -> Iterator:
    """``evaluator(task, language)``: one evaluator (one sandbox) per pair, closed at the end."""
    made: dict[tuple[str, str], SandboxEvaluator] = {}

    def get(name: str, language: str) -> SandboxEvaluator:
        if (name, language) not in made:
            made[name, language] = SandboxEvaluator(BUILTIN_TASKS / name, language,
                                                    _settings(compile_cache))
        return made[name, language]

    yield get
    for ev in made.values():
        ev.close()


def _assert_ok(evaluation, shapes: int) -> None:
    assert evaluation.status is Status.OK, evaluation.message
    assert "held-out" in evaluation.message
    assert len(evaluation.shapes) == shapes
    for shape in evaluation.shapes:
        assert shape.correct and shape.time_us > 0 and shape.eager_time_us > 0
        assert 0 < shape.roofline_fraction <= 1.5, shape


@pytest.mark.parametrize("name", CUDA_TASKS)
def test_cuda_starting_kernel_is_ok(evaluator, name):
    ev = evaluator(name, "cuda")
    _assert_ok(ev.evaluate(ev.start_candidate), len(ev.task.tuning_shapes))


@pytest.mark.parametrize("name", sorted(OTHER_KNOBS))
def test_cuda_starting_kernel_is_ok_at_another_block_size(evaluator, name):
    ev = evaluator(name, "cuda")
    evaluation = ev.evaluate(ev.start_candidate.derive(knobs=OTHER_KNOBS[name]))
    _assert_ok(evaluation, len(ev.task.tuning_shapes))
    blocks = {tuple(launch["block"]) for launch in evaluation.resources["launches"]}
    assert blocks == {(OTHER_KNOBS[name]["BLOCK"], 1, 1)}


@pytest.mark.parametrize("name", TRITON_TASKS)
def test_triton_starting_kernel_is_ok(evaluator, name):
    ev = evaluator(name, "triton")
    _assert_ok(ev.evaluate(ev.start_candidate), len(ev.task.tuning_shapes))


def test_baselines_script_measures_a_small_task(compile_cache, tmp_path, monkeypatch):
    monkeypatch.setenv(COMPILE_ENV, "1")
    out, markdown = tmp_path / "baselines.json", tmp_path / "baselines.md"
    code = baselines.main(["--tasks", "merge_attn_states_lse", "--budget-s", "0.05",
                           "--cache-dir", str(compile_cache), "--out", str(out),
                           "--markdown", str(markdown)])
    assert code == 0
    report = json.loads(out.read_text())
    task = report["tasks"]["merge_attn_states_lse"]
    assert task["error"] is None and task["shapes"]
    assert report["machine"]["copy_bandwidth_gbs"] > 100
    assert report["machine"]["peak_gflops"] > 1000
    rooflines = {s["shape"]: s["roofline_us"] for s in task["start"]["shapes"]}
    for shape in task["start"]["shapes"]:
        assert shape["start_check"] == "ok" and shape["roofline_us"] > 0
    for label, row in task["shapes"].items():
        for key in ("eager", "compile"):  # compile: specialised to the shape, best mode named
            assert not row[key].get("error") and row[key]["median_us"] > 0, (key, row)
            assert row[key]["median_us"] > 0.5 * rooflines[label], (key, row)
        assert row["compile"]["detail"].startswith("mode ") and row["compile"]["first_call_s"] > 0
    assert set(task["skipped"]) <= {"flashinfer", "sgl-kernel"}  # merge has no Liger anchor
    text = markdown.read_text()
    assert "### merge_attn_states_lse" in text and "| dtype=bfloat16," in text
    assert "Command: `python -m benchmarks.baselines" in text
