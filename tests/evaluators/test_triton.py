"""The triton language on the CPU: Triton's interpreter in the sandbox, never in this process.

The sandbox tests share the session's ``triton_evaluator`` (silu_and_mul with tiny shapes).
"""

from __future__ import annotations

import os
import sys

import pytest

from kernelswarm.evaluators.languages.compile_cache import cache_key
from kernelswarm.evaluators.languages.triton import KNOB_TRAILER, read_knobs
from kernelswarm.search import Status, load_task

TINY_LABELS = {"d=256,dtype=float32,tokens=1", "d=512,dtype=float32,tokens=4"}


@pytest.fixture(scope="module")
def triton_start(tiny_silu_task):
    return load_task(tiny_silu_task).starting_candidate("triton")


def test_starting_kernel_is_ok_under_the_interpreter(triton_evaluator, triton_start):
    evaluation = triton_evaluator.evaluate(triton_start)
    assert evaluation.status is Status.OK, evaluation.message
    assert {s.shape for s in evaluation.shapes} == TINY_LABELS
    for shape in evaluation.shapes:
        assert shape.correct and shape.max_abs_err <= 1e-5
        assert shape.time_us > 0 and shape.start_time_us > 0 and shape.eager_time_us > 0
    assert 0.5 < evaluation.speedup < 2.0
    assert "2 held-out shapes" in evaluation.message


def test_the_judge_neither_imports_the_kernel_nor_sets_the_interpreter(triton_evaluator,
                                                                       triton_start):
    before = os.environ.get("TRITON_INTERPRET")
    assert triton_evaluator.evaluate(triton_start).ok
    assert not [name for name in sys.modules if name.startswith("kernelswarm_triton_")]
    assert os.environ.get("TRITON_INTERPRET") == before
    assert triton_evaluator.language.sandbox_environment() == {"TRITON_INTERPRET": "1"}


def test_knobs_reach_the_entry_point_as_keyword_arguments(triton_evaluator, triton_start):
    assert triton_start.knob_values == {"BLOCK": 1024}
    smaller = triton_start.derive(knobs={"BLOCK": 256})
    assert triton_evaluator.compile(smaller).ok
    artifact = triton_evaluator.cache.root / f"{cache_key(triton_evaluator.language, smaller)}.py"
    assert read_knobs(artifact.read_text()) == {"BLOCK": 256}
    evaluation = triton_evaluator.evaluate(smaller)
    assert evaluation.status is Status.OK, evaluation.message


def test_a_knob_the_entry_point_does_not_take_is_a_compile_error(triton_evaluator,
                                                                 triton_start):
    source = triton_start.source.replace(", BLOCK=1024):", "):\n    BLOCK = 1024")
    evaluation = triton_evaluator.evaluate(triton_start.derive(source=source))
    assert evaluation.status is Status.COMPILE_ERROR
    assert "takes no parameter BLOCK" in evaluation.message


def test_a_syntax_error_is_a_compile_error_with_its_line(triton_evaluator, triton_start):
    source = triton_start.source.replace("grid = (", "grid = ((", 1)
    line = 1 + next(i for i, text in enumerate(source.splitlines()) if "grid = ((" in text)
    evaluation = triton_evaluator.evaluate(triton_start.derive(source=source))
    assert evaluation.status is Status.COMPILE_ERROR
    assert evaluation.message.startswith(f"kernel.py:{line}:")
    assert "was never closed" in evaluation.message


def test_the_entry_point_must_be_a_plain_function(triton_evaluator, triton_start):
    jitted = triton_start.derive(source=triton_start.source.replace(
        "def silu_and_mul(", "@triton.jit\ndef silu_and_mul("))
    assert "is a @triton.jit kernel" in triton_evaluator.compile(jitted).log
    renamed = triton_start.derive(source=triton_start.source.replace(
        "def silu_and_mul(", "def silu_and_mul_v2("))
    assert "defines no function `silu_and_mul`" in triton_evaluator.compile(renamed).log


def test_building_runs_none_of_the_module(triton_evaluator, triton_start):
    # Top-level code that would fail if it ran: a build only parses and compiles.
    source = triton_start.source + "\nraise RuntimeError('the build ran the module')\n"
    assert triton_evaluator.compile(triton_start.derive(source=source)).ok


def test_top_level_code_that_fails_in_the_sandbox_is_a_runtime_error(triton_evaluator,
                                                                      triton_start):
    source = triton_start.source + "\nraise RuntimeError('no GPU here')\n"
    evaluation = triton_evaluator.evaluate(triton_start.derive(source=source))
    assert evaluation.status is Status.RUNTIME_ERROR
    assert "RuntimeError: no GPU here" in evaluation.message
    assert f"(line {source.count(chr(10))} of the kernel)" in evaluation.message


def test_an_exception_in_the_entry_point_is_a_runtime_error_naming_the_shape(triton_evaluator,
                                                                            triton_start):
    source = triton_start.source.replace("    grid = (", "    assert d % 256 == 0, 'd'\n"
                                         "    grid = (")
    evaluation = triton_evaluator.evaluate(triton_start.derive(source=source))
    assert evaluation.status is Status.RUNTIME_ERROR
    assert "raised AssertionError: d on held-out shape d=100,dtype=float32,tokens=3" in \
        evaluation.message
    assert "held-out" in evaluation.message


def test_artifact_knob_line_round_trips():
    text = "x = 1\n" + KNOB_TRAILER + '{"BLOCK": 256, "VEC": true}\n'
    assert read_knobs(text) == {"BLOCK": 256, "VEC": True}
