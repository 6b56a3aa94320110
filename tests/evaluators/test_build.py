"""Screen and compile: what a coder sees before anything runs (no sandbox is started here)."""

from __future__ import annotations

import shutil
import uuid

import pytest

from kernelswarm.evaluators import SandboxEvaluator
from kernelswarm.search import Status
from tests.conftest import SILU_TASK
from tests.evaluators.kernel_library import kernel_source, quick_settings


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


def _compiler_killed(tmp_path, how: str, times: int) -> str:
    """A C++ compiler that the first ``times`` builds lose to a SIGKILL (``how``: the driver
    itself, or the program it drives, as g++ reports it), and that then builds with g++."""
    gxx = shutil.which("g++")
    count = tmp_path / "builds"
    death = {"driver": "kill -KILL $$",
             "child": "echo 'g++: fatal error: Killed signal terminated program cc1plus'; "
                      "exit 1"}[how]
    script = tmp_path / "killed-g++"
    script.write_text(f"""#!/bin/sh
case "$*" in *--version*) exec {gxx} "$@";; esac
echo x >> {count}
if [ "$(wc -l < {count})" -le {times} ]; then {death}; fi
exec {gxx} "$@"
""")
    script.chmod(0o755)
    return str(script)


@pytest.mark.parametrize("how", ["driver", "child"])
def test_a_compiler_killed_from_outside_is_run_again_and_nothing_is_cached(
        tmp_path, monkeypatch, start, how):
    """A compiler lost to a signal (out of memory; a worker shutting down kills its children
    first) says nothing of the source: one loss is built again, two are an error kept nowhere."""
    settings = quick_settings(tmp_path / "cache")
    fresh = start.derive(source=start.source + f"\n// build {uuid.uuid4().hex}\n")
    (tmp_path / "once").mkdir()
    monkeypatch.setenv("CXX", _compiler_killed(tmp_path / "once", how, 1))
    once = SandboxEvaluator(SILU_TASK, "cpp", settings)
    built = once.compile(fresh)
    assert built.ok, built.log
    assert (tmp_path / "once" / "builds").read_text().count("x") == 2

    other = fresh.derive(source=fresh.source + "// and another\n")
    (tmp_path / "always").mkdir()
    monkeypatch.setenv("CXX", _compiler_killed(tmp_path / "always", how, 99))
    lost = SandboxEvaluator(SILU_TASK, "cpp", settings)
    failed = lost.compile(other)
    assert not failed.ok and "killed by a signal twice" in failed.log
    assert "out of memory" in failed.log
    assert (tmp_path / "always" / "builds").read_text().count("x") == 2
    monkeypatch.delenv("CXX")
    assert SandboxEvaluator(SILU_TASK, "cpp", settings).compile(other).ok  # not kept as failed
