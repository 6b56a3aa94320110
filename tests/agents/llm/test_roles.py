"""The LLM roles driving the real lineage state machine, their kernels judged by the project's
sandboxed evaluator (g++, correctness on every shape, timing): correct kernels, kernels that do
not compile and wrong kernels fed back to the coder, checks, analyses and budgets."""

from __future__ import annotations

import pytest

from kernelswarm.agents.llm import LLMRoleFactory, Reply
from kernelswarm.search import REPAIR, Budget, Candidate, KnobTuner, Lineage, Status
from kernelswarm.search.evaluation import clearly_faster
from tests.agents.llm import answers
from tests.agents.llm.conftest import MODEL, settings_for
from tests.conftest import SILU_TASK


class Script:
    """A model that plans ``llm:`` moves, codes from a list, repairs from another list."""

    def __init__(self, code: list[str], repair: list[str] | None = None) -> None:
        self.code, self.repair = list(code), list(repair or [])

    def __call__(self, received):
        if received.request == "planner":
            return Reply(answers.plan("llm:fast-exp"), prompt_tokens=900, completion_tokens=100)
        if received.request == "analyst":
            return Reply(answers.analysis(), prompt_tokens=500, completion_tokens=50)
        queue = self.code if received.request == "coder" else self.repair
        if not queue:
            return Reply(status=500, content=f"script has no more {received.request} answers")
        return Reply(queue.pop(0), prompt_tokens=2000, completion_tokens=800)


@pytest.fixture(scope="module")
def start_eval(evaluator, start):
    evaluation = evaluator.evaluate(start)
    assert evaluation.ok, evaluation.message
    return evaluation


def run_lineage(server, evaluator, start: Candidate, start_eval, script: Script, *,
                budget: Budget, max_repairs: int = 2, **settings) -> tuple[Lineage, list]:
    server.responder = script
    roles = LLMRoleFactory(settings_for(server, **settings), SILU_TASK, "cpp")(0)
    lineage = Lineage(0, start, start_eval, roles, KnobTuner(0), budget, max_repairs=max_repairs)
    verdicts = []
    while (candidate := lineage.propose()) is not None:
        evaluation = evaluator.evaluate(candidate)
        lineage.observe(candidate, evaluation)
        verdicts.append((candidate, evaluation))
    return lineage, verdicts


def test_a_correct_kernel_from_the_coder_is_faster_and_carries_its_cost(server, evaluator, start,
                                                                        start_eval):
    lineage, verdicts = run_lineage(server, evaluator, start, start_eval,
                                    Script([answers.kernel(answers.FAST)]),
                                    budget=Budget(candidates=1))
    (candidate, evaluation), = verdicts
    assert evaluation.status is Status.OK and evaluation.speedup > 1.1
    # the lineage builds on it when it is faster beyond the timing noise (a loaded machine's
    # noise can hide a 1.1x gain)
    assert (lineage.best[0].id == candidate.id) == clearly_faster(evaluation, start_eval)
    origin = candidate.origin
    assert (origin.role, origin.move, origin.model) == ("coder", "llm:fast-exp", MODEL)
    # the start's analysis, the plan and the code: every token spent to propose it
    assert origin.tokens == (500 + 50) + (900 + 100) + (2000 + 800)
    assert origin.cost_usd == pytest.approx((3400 * 3.0 + 950 * 15.0) / 1e6)
    assert lineage.roles.usage().tokens == origin.tokens + 550  # and the analysis of its verdict
    prompt = server.received("coder")[0].prompt
    assert "fn(out.data_ptr(), x.data_ptr()" in prompt  # the task's calling contract
    assert "copy bandwidth" in prompt and "GB/s" in prompt  # the machine's figures


def test_a_kernel_that_does_not_compile_goes_back_to_the_coder_with_the_log(
        server, evaluator, start, start_eval):
    lineage, verdicts = run_lineage(server, evaluator, start, start_eval,
                                    Script([answers.kernel(answers.BROKEN)],
                                           [answers.kernel(answers.FAST, summary="semicolon")]),
                                    budget=Budget(candidates=2))
    assert [e.status for _, e in verdicts] == [Status.COMPILE_ERROR, Status.OK]
    repaired = verdicts[1][0]
    assert repaired.origin.move == REPAIR and repaired.parents == (verdicts[0][0].id,)
    request, = server.received("repair")
    assert "Status: COMPILE_ERROR" in request.prompt
    assert "error: expected" in request.prompt and "float g = gate[i]\n" in request.prompt
    assert (lineage.best[0].id == repaired.id) == clearly_faster(verdicts[1][1], start_eval)


def test_a_wrong_kernel_goes_back_with_its_failing_shape_until_the_repair_limit(
        server, evaluator, start, start_eval):
    wrong_again = answers.WRONG.replace("row[i] = g * up[i];", "row[i] = up[i] * g;")
    lineage, verdicts = run_lineage(server, evaluator, start, start_eval,
                                    Script([answers.kernel(answers.WRONG),
                                            answers.kernel(answers.FAST)],
                                           [answers.kernel(wrong_again)]),
                                    budget=Budget(candidates=3), max_repairs=1)
    assert [e.status for _, e in verdicts] == [Status.INCORRECT, Status.INCORRECT, Status.OK]
    assert [c.origin.move for c, _ in verdicts] == ["llm:fast-exp", REPAIR, "llm:fast-exp"]
    request, = server.received("repair")  # one repair allowed: then the planner again
    assert "Status: INCORRECT" in request.prompt
    assert "First failing shape: d=4096,dtype=float32,tokens=1" in request.prompt
    assert "wrong on d=4096,dtype=float32,tokens=1" in server.received("planner")[-1].prompt


def test_garbage_from_the_coder_is_asked_again_and_counted(server, evaluator, start, start_eval):
    lineage, verdicts = run_lineage(
        server, evaluator, start, start_eval,
        Script(["Sure! I made it faster.",
                "```cpp\nint main() {}\n```\n```json\n{\"knobs\": {}}\n```",
                answers.kernel(answers.FAST)]),
        budget=Budget(candidates=1))
    assert [e.status for _, e in verdicts] == [Status.OK]
    coder = server.received("coder")
    assert "give exactly one kernel" in coder[1].messages[-1]["content"]
    assert "must still define `silu_and_mul`" in coder[2].messages[-1]["content"]
    assert lineage.roles.coder.usage().malformed == 2


def test_a_token_budget_stops_the_lineage_and_says_so(server, evaluator, start, start_eval):
    lineage, verdicts = run_lineage(server, evaluator, start, start_eval,
                                    Script([answers.kernel(answers.FAST)] * 5),
                                    budget=Budget(candidates=5, tokens=4000))
    assert len(verdicts) == 1  # two analyses, a plan and a kernel: 4,900 tokens
    assert lineage.stop_reason == "token budget reached (4,900 of 4,000 tokens)"


def test_the_tester_proposes_checks_and_a_bad_shape_is_asked_again(server, silu_task):
    good = {"shape": {"tokens": 1, "d": 7, "dtype": "float32"}, "scale": 1.0, "reason": "odd"}
    big = {"shape": {"tokens": 3, "d": 1001, "dtype": "float32"}, "scale": 80.0,
           "reason": "large values"}
    server.push(Reply(answers.checks(good, {"shape": {"tokens": 1, "dtype": "float32"}})),
                Reply(answers.checks(good, big, good)))
    tester = LLMRoleFactory(settings_for(server), SILU_TASK, "cpp")(0).tester
    checks = tester.checks(silu_task, "cpp")
    assert [(c.label, c.reason) for c in checks] == [
        ("d=7,dtype=float32,tokens=1", "odd"), ("d=1001,dtype=float32,tokens=3,scale=80", "large values")]
    assert "checks[1].shape must have exactly the keys d, dtype, tokens; got dtype, tokens" in \
        server.requests[1].messages[-1]["content"]


def test_the_analyst_summarises_correct_kernels_only(server, evaluator, start, start_eval):
    server.push(Reply(answers.analysis("compute")))
    analyst = LLMRoleFactory(settings_for(server), SILU_TASK, "cpp")(0).analyst
    feedback = analyst.analyse(start, start_eval)
    assert "Analyst: bandwidth-bound on every shape" in feedback.summary
    assert feedback.facts.bound == "compute" and feedback.facts.ok is True
    broken = start.derive(source=answers.BROKEN)
    failed = analyst.analyse(broken, evaluator.evaluate(broken))
    assert "COMPILE_ERROR" in failed.summary and len(server.requests) == 1
