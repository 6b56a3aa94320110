"""The four roles driven by language models.

Each role renders its template with what the lineage knows, asks its model through a
``ChatClient`` (retries, re-asks on malformed answers, accounting, trace), and turns the
answer into the search's objects. What a model fails to deliver never crashes the lineage:

- planner: a request that fails or hits the spending limit becomes ``stop`` with the reason;
- coder: ``rewrite:<name>`` moves are applied by the built-in coder (no call); a failed request
  returns None (the lineage records "no new candidate"; after a failed ``repair`` the planner
  takes over);
- tester: a failed request adds no checks;
- analyst: the built-in analysis always; the model summarises profiles of correct kernels only
  (a failure's verdict and log already say what happened), and its failure leaves the built-in
  analysis alone; the starting kernel is analysed once per run, shared by the lineages.

Moves: ``llm:<short name>`` is a change the LLM coder writes from the plan's rationale;
``tune``, ``adopt``, ``stop`` and ``rewrite:<name>`` keep their meaning.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from kernelswarm.agents.builtin import RuleAnalyst, RuleCoder, transformations_for
from kernelswarm.search import (
    REPAIR,
    REWRITE,
    SPECS,
    STOP,
    Analyst,
    Candidate,
    Check,
    Coder,
    Evaluation,
    Feedback,
    LineageView,
    Origin,
    Plan,
    Planner,
    Task,
    Tester,
    Usage,
)

from . import answers, context
from .client import ChatClient, LLMError
from .ledger import Ledger
from .templates import PromptTemplate


class _LLMRole:
    role = ""

    def __init__(self, client: ChatClient, templates: Mapping[str, PromptTemplate], task: Task,
                 language: str) -> None:
        self.client = client
        self.templates = templates
        self.task = task
        self.language = language
        self.history_limit = client.settings.history
        self.migrant_limit = client.settings.migrants

    @property
    def ledger(self) -> Ledger:
        return self.client.ledger

    @property
    def model(self) -> str:
        return self.client.model.model

    def usage(self) -> Usage:
        return self.ledger.usage(self.role)

    def until(self, deadline: float) -> None:
        """The lineage's calls end by ``deadline`` (the ledger is the four roles')."""
        self.ledger.deadline = deadline

    def _common(self, view: LineageView) -> dict[str, Any]:
        current = context.evaluation_of(view.current, view)
        return {
            "task": context.task_section(self.task, self.language), "language": self.language,
            "kernel": context.kernel_section(view.current),
            "knob_conventions": SPECS[self.language].knob_guide,
            "profile": context.profile_section(current),
            "machine": context.machine_section(
                [current, *(p[1] if p else None for p in (view.best, view.global_best))]),
            "history": context.history_section(view, self.history_limit),
            "feedback": context.feedback_section(view.feedback),
            "elites": context.elites_section(view, self.migrant_limit)}

    def _ask(self, request: str, values: Mapping[str, Any], parse: Any) -> Any:
        messages = self.templates[request].render(values)
        return self.client.ask(request, messages, parse)


class LLMPlanner(_LLMRole, Planner):
    role = "planner"

    def plan(self, view: LineageView) -> Plan:
        global_best = view.global_best
        choice = answers.MoveChoice(
            rewrites=tuple(t.name for t in transformations_for(self.language)),
            can_tune=bool(view.current.knob_space),
            can_adopt=global_best is not None and global_best[0].id != view.current.id
            and (view.best is None or global_best[1].speedup > view.best[1].speedup))
        values = {**self._common(view), "stage": view.stage, "moves": choice.allowed(),
                  "answer_example": answers.PLAN_EXAMPLE}
        try:
            return self._ask("planner", values, lambda text: answers.parse_plan(text, choice))
        except LLMError as exc:
            return Plan(STOP, str(exc))


class LLMCoder(_LLMRole, Coder):
    """Writes kernels for ``llm:`` moves and repairs failed ones; ``rewrite:`` moves go to the
    built-in coder."""

    role = "coder"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._rules = RuleCoder()

    def _candidate(self, parent: Candidate, answer: answers.KernelAnswer, move: str,
                   rationale: str) -> Candidate:
        tokens, cost = self.ledger.since_last_candidate()
        origin = Origin(role="coder", move=move, rationale=rationale, model=self.model,
                        tokens=tokens, cost_usd=cost)
        kept = {k: v for k, v in parent.knob_values.items()
                if k in answer.knob_space and v in answer.knob_space[k]}
        return parent.derive(source=answer.source, knob_space=answer.knob_space, knobs=kept,
                             origin=origin)

    def code(self, plan: Plan, parent: Candidate, view: LineageView) -> Candidate | None:
        if plan.move.startswith(REWRITE):
            return self._rules.code(plan, parent, view)
        if not plan.move.startswith(answers.LLM_MOVE):
            return None
        values = {**self._common(replace(view, current=parent)), "move": plan.move,
                  "rationale": plan.rationale, "answer_example": answers.KERNEL_EXAMPLE}
        try:
            answer = self._ask("coder", values, lambda text: answers.parse_kernel(text, parent))
        except LLMError:
            return None
        return self._candidate(parent, answer, plan.move, plan.rationale)

    def repair(self, failed: Candidate, evaluation: Evaluation,
               view: LineageView) -> Candidate | None:
        values = {**self._common(replace(view, current=failed)),
                  "failure": context.failure_section(evaluation),
                  "answer_example": answers.KERNEL_EXAMPLE}
        try:
            answer = self._ask("repair", values, lambda text: answers.parse_kernel(text, failed))
        except LLMError:
            return None
        shape = evaluation.failed_shape()
        why = f"repair of {failed.id} ({evaluation.status.value}" + \
            (f" on {shape.shape})" if shape else ")")
        return self._candidate(failed, answer, REPAIR, f"{why}: {answer.summary}".strip(": "))


class LLMTester(_LLMRole, Tester):
    role = "tester"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.error = ""  # why the last request gave no checks, for the run's console

    def checks(self, task: Task, language: str) -> tuple[Check, ...]:
        values = {"task": context.task_section(task, language), "language": language,
                  "max_checks": answers.MAX_CHECKS, "answer_example": answers.CHECKS_EXAMPLE}
        try:
            found = self._ask("tester", values, lambda text: answers.parse_checks(text, task))
        except LLMError as exc:
            self.error = str(exc)
            return ()
        self.error = ""
        return found


def _once(path: Path, compute: Callable[[], dict[str, str]]) -> dict[str, str]:
    """``compute()``, done once across the processes sharing ``path``'s folder: the first to
    take the lock computes and writes it; the others wait for the lock and read it."""
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if path.is_file():
            return json.loads(path.read_text(encoding="utf-8"))
        value = compute()
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        temporary.write_text(json.dumps(value), encoding="utf-8")
        os.replace(temporary, path)
        return value


# The starting kernel's analysis may use this share of the time left to the deadline: the
# built-in analysis stands without it, and a model that hangs must leave the planner time.
START_ANALYSIS_SHARE = 1 / 4
START_ANALYSIS_DEADLINE = ("the starting kernel's analysis's share of the wall time (a quarter "
                           "of what was left of search.wall_time_s)")


class LLMAnalyst(_LLMRole, Analyst):
    """``shared_dir``: where the lineages of a run share the starting kernel's analysis, so the
    model is asked about it once per run."""

    role = "analyst"

    def __init__(self, *args: Any, shared_dir: Path | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._rules = RuleAnalyst()
        self.shared_dir = shared_dir

    def analyse(self, candidate: Candidate, evaluation: Evaluation) -> Feedback:
        base = self._rules.analyse(candidate, evaluation)
        if not evaluation.ok:
            return base
        if candidate.origin.role == "seed":  # every lineage's first step waits on it
            with self.ledger.share_of_time(START_ANALYSIS_SHARE, START_ANALYSIS_DEADLINE):
                if self.shared_dir is None:
                    found = self._ask_model(candidate, evaluation)
                else:
                    self.shared_dir.mkdir(parents=True, exist_ok=True)
                    found = _once(self.shared_dir / f"analysis-{evaluation.candidate_id}.json",
                                  lambda: self._ask_model(candidate, evaluation))
        else:
            found = self._ask_model(candidate, evaluation)
        if "error" in found:
            return Feedback(base.summary, replace(base.facts, analyst_error=found["error"]))
        summary = f"{base.summary} Analyst: {found['summary']}"
        if found["suggestion"]:
            summary += f" Suggested next: {found['suggestion']}"
        # ``bound`` is the fact the lineage's staged optimisation reads.
        return Feedback(summary, replace(base.facts, bound=found["bottleneck"],
                                         suggestion=found["suggestion"]))

    def _ask_model(self, candidate: Candidate, evaluation: Evaluation) -> dict[str, str]:
        """The model's analysis as plain values, or ``{"error": why}``."""
        values = {"task": context.task_section(self.task, self.language),
                  "language": self.language, "kernel": context.kernel_section(candidate),
                  "profile": context.profile_section(evaluation),
                  "machine": context.machine_section([evaluation]),
                  "answer_example": answers.ANALYSIS_EXAMPLE}
        try:
            analysis = self._ask("analyst", values, answers.parse_analysis)
        except LLMError as exc:
            return {"error": str(exc)}
        return {"summary": analysis.summary, "bottleneck": analysis.bottleneck,
                "suggestion": analysis.suggestion}
