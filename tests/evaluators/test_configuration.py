"""Configuration errors: settings that name the field, unusable languages, a broken task."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator
from kernelswarm.search import StartingKernelFailed, Status
from tests.conftest import SILU_TASK
from tests.evaluators.kernel_library import quick_settings


def test_cache_dir_follows_the_environment_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("KERNELSWARM_CACHE", str(tmp_path / "cache"))
    assert EvaluatorSettings().cache_dir == tmp_path / "cache"
    monkeypatch.delenv("KERNELSWARM_CACHE")
    assert EvaluatorSettings().cache_dir == Path.home() / ".cache" / "kernelswarm" / "compile"


@pytest.mark.parametrize("field, value", [
    ("run_timeout_s", 0), ("compile_timeout_s", -1.0), ("timing_budget_s", float("nan")),
    ("seeds", 0), ("min_repeats", 2.5), ("warmup", -1), ("flush_cache", "yes"),
    ("memory_limit_mb", 10), ("device", ""),
])
def test_invalid_values_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"EvaluatorSettings.{field}"):
        EvaluatorSettings(**{field: value})


def test_max_repeats_below_min_repeats_is_refused():
    with pytest.raises(ValueError, match="max_repeats"):
        EvaluatorSettings(min_repeats=10, max_repeats=5)


def test_unknown_language_and_wrong_device_are_configuration_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown kernel language 'fortran'; known: cpp, cuda"):
        SandboxEvaluator(SILU_TASK, "fortran", EvaluatorSettings(cache_dir=tmp_path))
    with pytest.raises(ValueError, match="device='cpu' cannot run language 'cuda'"):
        SandboxEvaluator(SILU_TASK, "cuda", EvaluatorSettings(cache_dir=tmp_path))
    with pytest.raises(ValueError, match="device='cuda' cannot run language 'cpp'"):
        SandboxEvaluator(SILU_TASK, "cpp", EvaluatorSettings(device="cuda", cache_dir=tmp_path))


def test_a_starting_kernel_that_fails_its_own_task_raises_its_verdict(silu_task_copy, tmp_path):
    kernel = silu_task_copy / "silu_and_mul.cpp"
    kernel.write_text(kernel.read_text().replace("* up[i]", "* up[i] * 2.0f"))
    evaluator = SandboxEvaluator(silu_task_copy, "cpp", quick_settings(tmp_path))
    try:
        with pytest.raises(StartingKernelFailed, match=r"fails evaluation \(INCORRECT\): "
                                                       r"wrong result on shape") as raised:
            evaluator.evaluate(evaluator.start_candidate)
        assert raised.value.evaluation.candidate_id == evaluator.start_candidate.id
        assert raised.value.evaluation.status is Status.INCORRECT
    finally:
        evaluator.close()
