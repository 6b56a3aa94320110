"""No held-out shape reaches an agent: a kernel right on the tuning shapes and wrong on held-out
ones, judged by the real sandboxed evaluator, goes back to the coder and the planner, and the
loopback server, which keeps every prompt, shows that none of them held a held-out shape's
values or errors; only that a held-out check failed, and the shape's class."""

from __future__ import annotations

import re

import pytest

from kernelswarm.search import Budget, Evaluation, ShapeResult, Status, Withheld
from tests.agents.llm import answers
from tests.agents.llm.test_roles import Script, run_lineage

# Right for row lengths that are multiples of 8 (every tuning shape's), wrong on the others:
# the tail of each row is never written.
TAIL_DROPPED = answers.START.replace("for (int64_t i = 0; i < d; ++i)",
                                     "for (int64_t i = 0; i < (d & ~int64_t(7)); ++i)")


def _leaks(text: str, withheld: Withheld) -> list[str]:
    """Every trace of a held-out shape in ``text``: its label, or any of its sizes that no
    tuning shape has, written as key=value or as a bare number."""
    found = [label for label in withheld.labels if label in text]
    tuned = {(k, s[k]) for s in withheld.tuning for k in s}
    for shape in withheld.heldout:
        for key in shape:
            value = shape[key]
            if isinstance(value, int) and (key, value) not in tuned:
                if re.search(rf"\b{key}\s*[=:]\s*{value}\b", text) or \
                        (value >= 100 and re.search(rf"(?<![\d.]){value}(?![\d.])", text)):
                    found.append(f"{key}={value}")
    return found


@pytest.fixture(scope="module")
def start_eval(evaluator, start):
    evaluation = evaluator.evaluate(start)
    assert evaluation.ok, evaluation.message
    return evaluation


def test_no_prompt_holds_a_held_out_shape(server, evaluator, start, start_eval, silu_task):
    assert not TAIL_DROPPED == answers.START
    lineage, verdicts = run_lineage(server, evaluator, start, start_eval,
                                    Script([answers.kernel(TAIL_DROPPED), answers.kernel(
                                        answers.FAST)], [answers.kernel(TAIL_DROPPED + "//\n")]),
                                    budget=Budget(candidates=3), max_repairs=1)
    first = verdicts[0][1]
    assert first.status is Status.INCORRECT
    withheld = Withheld.of(silu_task)
    assert _leaks(first.message, withheld)  # the evaluator does name it, to the user
    assert any(s.shape in withheld.labels for s in first.shapes)
    prompts = [r.prompt for r in server.requests]
    assert {r.request for r in server.requests} >= {"planner", "coder", "repair", "analyst"}
    for request, prompt in zip(server.requests, prompts, strict=True):
        assert not _leaks(prompt, withheld), (request.request, _leaks(prompt, withheld))
    repair, = server.received("repair")
    assert "Wrong results on a held-out check on a shape with d not a multiple of 8" \
        in repair.prompt
    assert "held-out check" in server.received("planner")[-1].prompt  # the history says so
    assert lineage.history[0].failed_shape == ""  # nothing held-out kept for the roles either


@pytest.mark.parametrize("message, shapes", [
    ("wrong result on held-out shape d=4099,dtype=float32,tokens=7 (seed 0): max abs err 1.2",
     ("d=4099,dtype=float32,tokens=7",)),
    ("held-out shape d=4099, tokens=7: segmentation fault", ()),  # wording only, other order
    ("process died on tokens: 7 and d: 4099 while checking", ()),
    ("wrong result on a held-out check", ()),  # no shape at all
])
def test_a_held_out_failure_is_screened_whatever_its_wording(silu_task, message, shapes):
    withheld = Withheld.of(silu_task)
    tuning = ShapeResult("d=4096,dtype=float32,tokens=1", correct=True, max_abs_err=0.0)
    evaluation = Evaluation("c", Status.INCORRECT, message,
                            (tuning, *(ShapeResult(s, max_abs_err=1.2) for s in shapes)),
                            metrics={"where": message})
    seen = withheld.screen(evaluation)
    assert seen.status is Status.INCORRECT and seen.shapes == (tuning,) and not seen.metrics
    assert "4099" not in seen.message and "held-out check" in seen.message
    if "4099" in message:
        assert "d not a multiple of 8 and above every tuning shape's; tokens not a power of " \
            "two" in seen.message
    ok = Evaluation("c", Status.OK, "correct on 3 tuning shapes, 3 held-out shapes", (tuning,))
    assert withheld.screen(ok) == ok  # a pass says nothing about them: unchanged
