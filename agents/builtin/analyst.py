"""The built-in analyst: an evaluation in, a paragraph for people and ``Facts`` for the planner.

``Facts`` (kernelswarm.search) holds what the planner and the lineage read: status, speedups,
the worst shape, roofline fractions (least over all shapes, over the large shapes whose ideal
time is ``LARGE_SHAPE_US`` or more, where bytes dominate, and over the others, bound by latency
and parallelism), the shapes more than ``BEHIND`` (3%) slower than ``torch.compile`` where it
was measured, registers and spills where the build reported them, and for an incorrect kernel
the first failing shape with its errors. What was not measured stays unset.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from kernelswarm.search import (
    Analyst,
    Candidate,
    Evaluation,
    Facts,
    Feedback,
    ShapeResult,
    Status,
)

MESSAGE_CHARS = 300
LARGE_SHAPE_US = 5.0  # ideal time from which a shape is bound by bandwidth rather than latency
BEHIND = 0.97  # speedup vs torch.compile below which a shape counts as behind it


def trim_message(message: str, limit: int = MESSAGE_CHARS) -> str:
    """The message on one line, cut to ``limit`` characters with an ellipsis."""
    flat = " ".join(message.split())
    return flat if len(flat) <= limit else flat[:limit - 3].rstrip() + "..."


def _finite(value: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _timing_facts(evaluation: Evaluation) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    timed = [s for s in evaluation.shapes if _finite(s.speedup_vs_start)]
    if timed:
        worst = min(timed, key=lambda s: s.speedup_vs_start)
        facts["worst_shape"], facts["worst_speedup"] = worst.shape, worst.speedup_vs_start
    fractions = [s.roofline_fraction for s in evaluation.shapes if _finite(s.roofline_fraction)]
    if fractions:
        facts["roofline_fraction"] = min(fractions)
    large = [s for s in evaluation.shapes if _finite(s.roofline_fraction) and _finite(s.time_us)
             and s.roofline_fraction * s.time_us >= LARGE_SHAPE_US]
    small = [s for s in evaluation.shapes if _finite(s.roofline_fraction) and s not in large]
    if large:
        facts["large_roofline_fraction"] = min(s.roofline_fraction for s in large)
    if small:
        facts["small_roofline_fraction"] = min(s.roofline_fraction for s in small)
    # torch.compile is timed only where the evaluator measured it (NaN otherwise): a shape
    # without that baseline is not behind it.
    facts["behind_compile"] = tuple(s.shape for s in evaluation.shapes
                                    if _finite(s.speedup_vs_compile)
                                    and s.speedup_vs_compile < BEHIND)
    return facts


def _resource_facts(evaluation: Evaluation) -> dict[str, Any]:
    kernels = evaluation.kernel_resources
    registers = [k.registers for k in kernels if k.registers is not None]
    spills = [k.spill_bytes for k in kernels if k.spill_bytes is not None]
    facts: dict[str, Any] = {}
    if registers:
        facts["registers"] = max(registers)
    if spills:
        facts["spill_bytes"] = sum(spills)
    return facts


def _failure_facts(shape: ShapeResult | None) -> dict[str, Any]:
    if shape is None:
        return {}
    return {"failed_shape": shape.shape, "max_abs_err": shape.max_abs_err,
            "max_rel_err": shape.max_rel_err}


def _describe(candidate: Candidate) -> str:
    move = candidate.origin.move or candidate.origin.role
    knobs = ", ".join(f"{k}={v}" for k, v in candidate.knobs)
    return f"candidate {candidate.id} ({move}{'; ' + knobs if knobs else ''})"


def _ok_summary(head: str, facts: Facts) -> str:
    parts = [f"{head} is correct and runs {facts.speedup:.2f}x as fast as the starting kernel "
             "(geometric mean over shapes)"]
    if facts.speedup_vs_eager > 0:
        parts.append(f"{facts.speedup_vs_eager:.2f}x PyTorch eager")
    if facts.worst_shape is not None and facts.worst_speedup is not None:
        parts.append(f"least gain on {facts.worst_shape} ({facts.worst_speedup:.2f}x)")
    if facts.roofline_fraction is not None:
        parts.append(f"it reaches {facts.roofline_fraction:.0%} of the roofline on its "
                     "farthest shape")
    if facts.behind_compile:
        parts.append(f"torch.compile is faster on {', '.join(facts.behind_compile)}")
    return "; ".join(parts) + "."


def _failed_summary(head: str, evaluation: Evaluation, facts: Facts) -> str:
    text = f"{head} failed with {evaluation.status.value}"
    if facts.failed_shape is not None:
        text += (f" on shape {facts.failed_shape} (max abs err {facts.max_abs_err:.3g}, "
                 f"max rel err {facts.max_rel_err:.3g})")
    if facts.message:
        text += f": {facts.message}"
    return text if text.endswith(".") else text + "."


def profile_facts(evaluation: Evaluation) -> Facts:
    """The timing, roofline and resource facts of an evaluation (those the planner orders by),
    without the fields that describe the candidate."""
    found = _resource_facts(evaluation)
    if evaluation.ok:
        found.update(_timing_facts(evaluation))
    return Facts(candidate_id=evaluation.candidate_id, status=evaluation.status, **found)


class RuleAnalyst(Analyst):
    """Summarises an evaluation in one paragraph and extracts the facts the planner reads."""

    def analyse(self, candidate: Candidate, evaluation: Evaluation) -> Feedback:
        facts = replace(profile_facts(evaluation), candidate_id=candidate.id,
                        move=candidate.origin.move, speedup=evaluation.speedup,
                        speedup_vs_eager=evaluation.speedup_vs_eager,
                        message=trim_message(evaluation.message),
                        knobs=candidate.knob_values, compile_s=evaluation.compile_s)
        head = _describe(candidate)
        head = head[0].upper() + head[1:]
        if evaluation.ok:
            return Feedback(summary=_ok_summary(head, facts), facts=facts)
        if evaluation.status is Status.SCREENED_OUT:  # correct; slower than the bar
            return Feedback(summary=f"{head} is correct but slower than this lineage's best: "
                                    f"{facts.message}", facts=facts)
        if evaluation.status is Status.INCORRECT:
            facts = replace(facts, **_failure_facts(evaluation.failed_shape()))
        return Feedback(summary=_failed_summary(head, evaluation, facts), facts=facts)
