"""Each cpp transformation on the real starting kernel of silu_and_mul: it changes the kernel,
compiles with g++, is idempotent, composes with the others, and keeps the kernel correct."""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor

import pytest

from kernelswarm.agents import TRANSFORMATIONS, transformations_for
from kernelswarm.agents.builtin.cpp_rewrites import TARGET_FEATURES, host_cpu_flags
from kernelswarm.search import Candidate, Status

NAMES = [t.name for t in transformations_for("cpp")]
HOST_HAS_TARGET = set(TARGET_FEATURES) <= host_cpu_flags()


def _apply(name: str, candidate: Candidate) -> Candidate:
    """``candidate`` rewritten by ``name``; skips target_isa where this CPU lacks AVX2/FMA."""
    if name == "target_isa" and not HOST_HAS_TARGET:
        assert TRANSFORMATIONS["cpp"][name].apply(candidate.source, candidate.space) is None
        pytest.skip("this CPU lacks AVX2/FMA, so target_isa (correctly) does not apply")
    result = TRANSFORMATIONS["cpp"][name].apply(candidate.source, candidate.space)
    assert result is not None, f"{name} does not apply to {candidate.id}"
    source, space = result
    return candidate.derive(source=source, knob_space=space)


def _largest_knobs(candidate: Candidate) -> Candidate:
    """The candidate at the last value of every knob (defaults are covered elsewhere)."""
    return candidate.derive(knobs={k: v[-1] for k, v in candidate.space.items()})


def test_the_library_has_the_promised_cpp_transformations():
    assert set(NAMES) >= {"restrict", "fast_exp", "simd", "unroll", "target_isa"}
    for transformation in transformations_for("cpp"):
        assert transformation.description and "\n" not in transformation.description
        assert "cpp" in transformation.languages
    assert transformations_for("no-such-language") == ()


@pytest.mark.parametrize("name", NAMES)
def test_each_transformation_changes_the_kernel_and_the_result_compiles(name, start, compile_cpp):
    child = _apply(name, start)
    assert child.source != start.source
    assert child.entry == start.entry
    for knobs in (child.knob_values, _largest_knobs(child).knob_values):
        built = compile_cpp(child.source, knobs, extra=("-Wall", "-Werror"))
        assert built.returncode == 0, built.stderr


@pytest.mark.parametrize("name", NAMES)
def test_applying_a_transformation_twice_gives_none(name, start):
    child = _apply(name, start)
    assert TRANSFORMATIONS["cpp"][name].apply(child.source, child.space) is None


def test_only_unroll_adds_a_knob_and_it_is_ks_unroll(start):
    for name in NAMES:
        if name == "target_isa" and not HOST_HAS_TARGET:
            continue
        space = _apply(name, start).space
        assert space == ({"KS_UNROLL": (1, 2, 4, 8)} if name == "unroll" else {})


def test_every_pair_composes_in_either_order_and_compiles(start, compile_cpp):
    names = [n for n in NAMES if n != "target_isa" or HOST_HAS_TARGET]
    pairs = list(itertools.permutations(names, 2))
    sources = {}
    for first, second in pairs:
        composed = _apply(second, _apply(first, start))
        assert composed.source != _apply(first, start).source
        sources[(first, second)] = _largest_knobs(composed)
    distinct = {c.id: c for c in sources.values()}  # many pairs commute to the same text
    with ThreadPoolExecutor(max_workers=2) as pool:
        builds = dict(zip(distinct, pool.map(
            lambda c: compile_cpp(c.source, c.knob_values, extra=("-fsyntax-only",)),
            distinct.values()), strict=True))
    failed = {pair: builds[c.id].stderr for pair, c in sources.items()
              if builds[c.id].returncode != 0}
    assert not failed


@pytest.mark.parametrize("name", NAMES)
def test_each_transformation_keeps_the_kernel_correct(name, start, evaluator):
    child = _largest_knobs(_apply(name, start))
    evaluation = evaluator.evaluate(child)
    assert evaluation.status is Status.OK, evaluation.message


def test_all_transformations_together_are_correct_and_faster(start, evaluator):
    kernel = start
    for name in NAMES:
        if name != "target_isa" or HOST_HAS_TARGET:
            kernel = _apply(name, kernel)
    for unroll in (1, 8):
        evaluation = evaluator.evaluate(kernel.derive(knobs={"KS_UNROLL": unroll}))
        assert evaluation.status is Status.OK, evaluation.message
        # fast_exp alone lets the loop vectorise: well over 1.5x on any x86 CPU measured so far.
        assert evaluation.speedup > 1.2, evaluation
