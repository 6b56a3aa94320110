"""RuleAnalyst: the paragraph a person reads and the facts the planner reads."""

from __future__ import annotations

import math
from dataclasses import replace

from kernelswarm.agents import RuleAnalyst
from kernelswarm.agents.builtin.analyst import MESSAGE_CHARS
from kernelswarm.search import Candidate, Evaluation, Origin, ShapeResult, Status

KERNEL = Candidate.create(language="cpp", source="// k", entry="f", knob_space={"KS_UNROLL": (1, 4)},
                          knobs={"KS_UNROLL": 4}, origin=Origin(role="coder", move="rewrite:simd"))


def _timed(shape: str, speedup: float, eager: float, roofline: float) -> ShapeResult:
    return ShapeResult(shape, correct=True, time_us=10.0, speedup_vs_start=speedup,
                       speedup_vs_eager=eager, roofline_fraction=roofline)


def test_a_correct_kernel_is_summarised_with_speedups_worst_shape_and_roofline():
    evaluation = Evaluation(KERNEL.id, Status.OK, "correct on 2 shapes", shapes=(
        _timed("tokens=1", 2.0, 0.5, 0.40), _timed("tokens=16", 8.0, 2.0, 0.75)))
    feedback = RuleAnalyst().analyse(KERNEL, evaluation)
    facts = feedback.facts
    assert facts.ok is True and facts.status is Status.OK
    assert facts.candidate_id == KERNEL.id and facts.move == "rewrite:simd"
    assert math.isclose(facts.speedup, 4.0) and math.isclose(facts.speedup_vs_eager, 1.0)
    assert facts.worst_shape == "tokens=1" and facts.worst_speedup == 2.0
    assert facts.roofline_fraction == 0.40
    assert facts.knobs == {"KS_UNROLL": 4}
    for words in ("4.00x", "1.00x PyTorch eager", "tokens=1 (2.00x)", "40% of the roofline",
                  "rewrite:simd", "KS_UNROLL=4"):
        assert words in feedback.summary
    assert "\n" not in feedback.summary


def test_an_incorrect_kernel_names_the_failed_shape_and_its_errors():
    evaluation = Evaluation(KERNEL.id, Status.INCORRECT, "output 0 differs at [0, 5]", shapes=(
        ShapeResult("tokens=1", max_abs_err=0.0, max_rel_err=0.0, correct=True),
        ShapeResult("tokens=16", max_abs_err=0.25, max_rel_err=0.5, correct=False)))
    feedback = RuleAnalyst().analyse(KERNEL, evaluation)
    assert feedback.facts.ok is False and feedback.facts.speedup == 0.0
    assert feedback.facts.failed_shape == "tokens=16"
    assert feedback.facts.max_abs_err == 0.25
    assert "INCORRECT on shape tokens=16" in feedback.summary
    assert "output 0 differs at [0, 5]" in feedback.summary
    assert feedback.facts.roofline_fraction is None


def test_a_screened_out_kernel_is_described_as_correct_and_slower_not_as_failed():
    from kernelswarm.agents.builtin.planner import _last_result

    evaluation = Evaluation(KERNEL.id, Status.SCREENED_OUT, "screened out: slower than its "
                            "lineage's best beyond noise on each of the 1 screening shapes",
                            shapes=(_timed("tokens=1", 0.6, 0.2, 0.1),))
    feedback = RuleAnalyst().analyse(KERNEL, evaluation)
    assert feedback.facts.ok is False and feedback.facts.status is Status.SCREENED_OUT
    assert "is correct but slower than this lineage's best: screened out" in feedback.summary
    assert "failed" not in feedback.summary
    assert _last_result(feedback.facts) == ("Last: rewrite:simd was correct but slower than this "
                                            "lineage's best (screened out). ")


def test_a_long_compiler_log_is_trimmed_to_one_line():
    log = "kernel.cpp:3:5: error: 'foo' was not declared in this scope\n" + "note: ...\n" * 200
    evaluation = Evaluation(KERNEL.id, Status.COMPILE_ERROR, log)
    feedback = RuleAnalyst().analyse(KERNEL, evaluation)
    assert len(feedback.facts.message) <= MESSAGE_CHARS
    assert feedback.facts.message.startswith("kernel.cpp:3:5: error: 'foo' was not declared")
    assert feedback.facts.failed_shape is None
    assert "COMPILE_ERROR" in feedback.summary and "\n" not in feedback.summary
    assert len(feedback.summary) < MESSAGE_CHARS + 200


def _against_compile(shape: str, vs_compile: float) -> ShapeResult:
    return ShapeResult(shape, correct=True, time_us=10.0, speedup_vs_start=1.5,
                       speedup_vs_compile=vs_compile, roofline_fraction=0.5)


def test_shapes_behind_torch_compile_are_named_only_where_it_was_measured():
    evaluation = Evaluation(KERNEL.id, Status.OK, "", shapes=(
        _against_compile("tokens=1", 0.5), _against_compile("tokens=16", 1.2)))
    feedback = RuleAnalyst().analyse(KERNEL, evaluation)
    assert feedback.facts.behind_compile == ("tokens=1",)
    assert "torch.compile is faster on tokens=1" in feedback.summary
    # Inside a search torch.compile may not be timed: NaN is "not measured", not "behind".
    unmeasured = Evaluation(KERNEL.id, Status.OK, "", shapes=(
        _against_compile("tokens=1", math.nan), _against_compile("tokens=16", math.nan)))
    feedback = RuleAnalyst().analyse(KERNEL, unmeasured)
    assert feedback.facts.behind_compile == ()
    assert "torch.compile" not in feedback.summary


def test_registers_and_spills_come_from_the_kernel_resources_of_a_stored_record():
    # a record written before kernel resources were a field reads into them, and the planner's
    # facts follow
    from kernelswarm.search.measured import KernelResources
    from kernelswarm.search.stored_form import typed_detail
    from tests.search.old_records import OLD_METRICS, OLD_RESOURCES

    stored = Evaluation(KERNEL.id, Status.OK, "", shapes=(_timed("tokens=1", 2.0, 1.0, 0.5),),
                        **typed_detail(OLD_RESOURCES, OLD_METRICS))
    facts = RuleAnalyst().analyse(KERNEL, stored).facts
    assert facts.registers == 32 and facts.spill_bytes == 12
    two = Evaluation(KERNEL.id, Status.OK, "", shapes=stored.shapes, kernel_resources=(
        KernelResources("a", registers=64), KernelResources("b", registers=40, spill_store_bytes=16)))
    facts = RuleAnalyst().analyse(KERNEL, two).facts
    assert facts.registers == 64 and facts.spill_bytes == 16
    unreported = RuleAnalyst().analyse(KERNEL, replace(two, kernel_resources=())).facts
    assert unreported.registers is None and unreported.spill_bytes is None
