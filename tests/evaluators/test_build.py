"""Screen and compile: what a coder sees before anything runs (no sandbox is started here)."""

from __future__ import annotations

import uuid

from kernelswarm.search import Status
from tests.evaluators.kernel_library import kernel_source


def test_compile_error_quotes_the_compilers_file_and_line(offline_evaluator, variant):
    evaluation = offline_evaluator.evaluate(variant("compile_error"))
    assert evaluation.status is Status.COMPILE_ERROR
    assert "kernel.cpp:9:" in evaluation.message
    assert "fast_silu" in evaluation.message
    assert offline_evaluator._spares is None  # no runner was started for a kernel that does not build


def test_knobs_reach_the_compiler_as_macro_definitions(offline_evaluator, variant):
    wrong = variant("needs_knob", KS_TEST_KNOB=(1, 2))
    right = wrong.derive(knobs={"KS_TEST_KNOB": 2})
    built = offline_evaluator.compile(wrong)
    assert not built.ok and "KS_TEST_KNOB must be 2" in built.log
    assert offline_evaluator.compile(right).ok


def test_second_compile_of_a_candidate_is_cached_and_fast(offline_evaluator, start):
    fresh = start.derive(source=start.source + f"\n// build {uuid.uuid4().hex}\n")
    first = offline_evaluator.compile(fresh)
    second = offline_evaluator.compile(fresh)
    assert first.ok and not first.cached
    assert second.ok and second.cached
    assert second.seconds < max(first.seconds / 5, 0.05)


def test_a_failed_build_is_remembered_too(offline_evaluator, variant):
    broken = variant("compile_error")
    offline_evaluator.compile(broken)
    again = offline_evaluator.compile(broken)
    assert not again.ok and again.cached and "fast_silu" in again.log


def test_screen_rejects_a_kernel_that_starts_a_thread(offline_evaluator, variant):
    candidate = variant("spawns_thread")
    evaluation = offline_evaluator.evaluate(candidate)
    assert evaluation.status is Status.REJECTED
    assert "threads" in evaluation.message and "line 4" in evaluation.message
    built = offline_evaluator.compile(candidate)
    assert not built.ok and built.rejected
    assert built.as_evaluation().status is Status.REJECTED


def test_missing_extern_c_entry_is_a_compile_error(offline_evaluator, start):
    mangled = start.derive(source=start.source.replace('extern "C" ', ""))
    evaluation = offline_evaluator.evaluate(mangled)
    assert evaluation.status is Status.COMPILE_ERROR
    assert "does not export `silu_and_mul`" in evaluation.message


def test_a_quoted_include_is_refused_before_the_compiler_can_read_the_file(offline_evaluator,
                                                                           start):
    sneaky = start.derive(source='#include "/etc/passwd"\n' + kernel_source("wrong_math"))
    built = offline_evaluator.compile(sneaky)
    assert built.rejected and "non-system includes" in built.log and "root:" not in built.log
