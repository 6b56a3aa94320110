"""The built-in analyst: an evaluation in, a paragraph for people and facts for the planner out.

Facts (``Feedback.facts``), the keys the built-in planner reads; absent where not known:

``candidate_id``        the evaluated candidate
``move``                the move that produced it (``origin.move``: ``rewrite:<name>``, ``tune``, ...)
``status``              the ``Status`` value, e.g. ``"OK"``, ``"INCORRECT"``
``ok``                  whether it passed
``speedup``             geometric mean over shapes vs the starting kernel (0 unless ok)
``speedup_vs_eager``    the same vs PyTorch eager (0 unless ok and measured)
``worst_shape``         label of the shape with the least speedup vs the start, and
``worst_speedup``       that speedup
``roofline_fraction``   ideal time / measured time on the shape farthest from the roofline
                        (the least fraction), where the evaluator computed it
``large_roofline_fraction``  the least roofline fraction over the large shapes (ideal time, the
                        roofline fraction times the measured time, of ``LARGE_SHAPE_US`` or more):
                        how near the bandwidth roof the kernel is where bytes dominate
``small_roofline_fraction``  the same over the other shapes (bound by latency and parallelism)
``behind_compile``      labels of shapes more than ``BEHIND`` (3%) slower than ``torch.compile``,
                        where it was measured
``registers``           the most registers per thread of the candidate's kernels, and
``spill_bytes``         their spill stores and loads, where the build reported them
``failed_shape``        label of the first incorrect shape (INCORRECT only), with ``max_abs_err``, ``max_rel_err``
``message``             the evaluator's message, trimmed to ``MESSAGE_CHARS``
``knobs``               the candidate's knob values (dict)
``compile_s``           seconds spent compiling
"""

from __future__ import annotations

import math
from typing import Any

from kernelswarm.search import Analyst, Candidate, Evaluation, Feedback, ShapeResult, Status

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
    facts["behind_compile"] = [s.shape for s in evaluation.shapes
                               if _finite(s.speedup_vs_compile) and s.speedup_vs_compile < BEHIND]
    return facts


def _resource_facts(evaluation: Evaluation) -> dict[str, Any]:
    kernels = evaluation.resources.get("kernels") if evaluation.resources else None
    if not isinstance(kernels, dict) or not kernels:
        return {}
    entries = [k for k in kernels.values() if isinstance(k, dict)]
    registers = [k["registers"] for k in entries if isinstance(k.get("registers"), int)]
    spills = [k.get("spill_store_bytes", 0) + k.get("spill_load_bytes", 0) for k in entries
              if isinstance(k.get("spill_store_bytes", 0), int)
              and isinstance(k.get("spill_load_bytes", 0), int)]
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


def _ok_summary(head: str, facts: dict[str, Any]) -> str:
    parts = [f"{head} is correct and runs {facts['speedup']:.2f}x as fast as the starting kernel "
             "(geometric mean over shapes)"]
    if facts["speedup_vs_eager"] > 0:
        parts.append(f"{facts['speedup_vs_eager']:.2f}x PyTorch eager")
    if "worst_shape" in facts:
        parts.append(f"least gain on {facts['worst_shape']} ({facts['worst_speedup']:.2f}x)")
    if "roofline_fraction" in facts:
        parts.append(f"it reaches {facts['roofline_fraction']:.0%} of the roofline on its "
                     "farthest shape")
    return "; ".join(parts) + "."


def _failed_summary(head: str, evaluation: Evaluation, facts: dict[str, Any]) -> str:
    text = f"{head} failed with {evaluation.status.value}"
    if "failed_shape" in facts:
        text += (f" on shape {facts['failed_shape']} (max abs err {facts['max_abs_err']:.3g}, "
                 f"max rel err {facts['max_rel_err']:.3g})")
    if facts["message"]:
        text += f": {facts['message']}"
    return text if text.endswith(".") else text + "."


def profile_facts(evaluation: Evaluation) -> dict[str, Any]:
    """The timing, roofline and resource facts of an evaluation (those the planner orders by)."""
    facts = _resource_facts(evaluation)
    if evaluation.ok:
        facts.update(_timing_facts(evaluation))
    return facts


class RuleAnalyst(Analyst):
    """Summarises an evaluation in one paragraph and extracts the facts the planner reads."""

    def analyse(self, candidate: Candidate, evaluation: Evaluation) -> Feedback:
        facts: dict[str, Any] = {
            "candidate_id": candidate.id,
            "move": candidate.origin.move,
            "status": evaluation.status.value,
            "ok": evaluation.ok,
            "speedup": evaluation.speedup,
            "speedup_vs_eager": evaluation.speedup_vs_eager,
            "message": trim_message(evaluation.message),
            "knobs": candidate.knob_values,
            "compile_s": evaluation.compile_s,
        }
        head = _describe(candidate)
        facts.update(_resource_facts(evaluation))
        if evaluation.ok:
            facts.update(_timing_facts(evaluation))
            summary = _ok_summary(head[0].upper() + head[1:], facts)
        else:
            if evaluation.status is Status.INCORRECT:
                facts.update(_failure_facts(evaluation.failed_shape()))
            summary = _failed_summary(head[0].upper() + head[1:], evaluation, facts)
        return Feedback(summary=summary, facts=facts)
