"""What the LLM agent is doing and spending, for the console and summary.json.

Each lineage's ledger keeps a state file beside its trace (``agents.llm.ledger``): spending per
role, the request it is waiting on, the requests that failed. The run reads them here: the live
view shows who waits on which model ("waiting on planner, 34 s, attempt 2/5") and the spending so
far, failures are printed as they happen, and the closing table and summary.json give the
spending per role. The run's start-up request (the tester's) is in the starting kernel's
lineage, ``START_LINEAGE``. A lineage whose ledger has not written its state since the run
began is still starting: its Ray worker process importing the task, its roles and compiler,
seconds on a busy machine, which the view says rather than showing nothing.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kernelswarm.agents import START_LINEAGE, TRACE_FOLDER, LedgerState, read_states
from kernelswarm.search import Usage

ROLE_ORDER = ("planner", "coder", "analyst", "tester")
STARTING = "starting its process (imports, roles, compiler)"


def one_line(text: str, limit: int | None = None) -> str:
    """``text`` on one line (a stop reason may quote a fenced example over several), its
    words as they are: "no ```json block" reads on the console as summary.json has it."""
    flat = " ".join(text.split())
    return flat if limit is None or len(flat) <= limit else flat[:limit - 1] + "…"


def _by_role(states: dict[int, LedgerState]) -> dict[str, Usage]:
    totals: dict[str, Usage] = {}
    for state in states.values():
        for role, usage in state.usage.items():
            totals[role] = totals.get(role, Usage()) + usage
    return dict(sorted(totals.items(), key=lambda item: (
        ROLE_ORDER.index(item[0]) if item[0] in ROLE_ORDER else len(ROLE_ORDER), item[0])))


def _total(usages: dict[str, Usage]) -> Usage:
    total = Usage()
    for usage in usages.values():
        total = total + usage
    return total


def _figures(usage: Usage) -> dict[str, Any]:
    return {**asdict(usage), "tokens": usage.tokens}


class LLMWatch:
    """Follows a run's ledger state files; ``stats()`` for the live view, ``echo`` for the
    failures not yet printed. ``lineages``: how many the run has (0: no LLM roles), each said
    to be starting until its ledger writes its state."""

    def __init__(self, run_dir: Path, lineages: int = 0) -> None:
        self.folder = run_dir / TRACE_FOLDER
        self.lineages = lineages
        self._began = time.time()  # a resumed run's state files from before are not its start
        # lineage -> failures printed; those before the watch began were printed by their caller
        self._printed = {n: s.failed for n, s in read_states(self.folder).items()}

    def stats(self) -> dict[str, Any]:
        """``{"roles": {role: figures}, "total": figures, "waiting": {lineage: text}}``
        (``STARTING`` for a lineage not up yet); empty when there is nothing to show."""
        states = read_states(self.folder)
        now = time.time()
        waiting = {n: STARTING for n in range(self.lineages)
                   if n not in states or states[n].written < self._began}
        waiting.update({n: s.waiting.describe(now) for n, s in states.items()
                        if s.waiting is not None and n not in waiting})
        if not states and not waiting:
            return {}
        roles = _by_role(states)
        return {"roles": {role: _figures(u) for role, u in roles.items()},
                "total": _figures(_total(roles)), "waiting": waiting}

    def echo(self, console: Console) -> None:
        """Print each failed request once: "lineage 1: analyst: timeout after 5 attempts: ..."."""
        for lineage, state in sorted(read_states(self.folder).items()):
            printed = self._printed.get(lineage, 0)
            new = state.failed - printed
            if new <= 0:
                continue
            who = "start-up" if lineage == START_LINEAGE else f"lineage {lineage}"
            for failure in state.failures[-min(new, len(state.failures)):]:
                console.print(f"[yellow]{who}: LLM request failed:[/] {escape(one_line(failure, 300))}",
                              highlight=False)
            self._printed[lineage] = state.failed

    def summary(self) -> dict[str, Any] | None:
        """Spending per role, per lineage and in all, for summary.json; None without LLM."""
        states = read_states(self.folder)
        if not states:
            return None
        roles = _by_role(states)
        return {"roles": {role: _figures(u) for role, u in roles.items()},
                "total": _figures(_total(roles)),
                "lineages": {str(n): _figures(_total(s.usage)) for n, s in sorted(states.items())},
                "start_up": _figures(_total(states[START_LINEAGE].usage))
                if START_LINEAGE in states else None,
                "failed_requests": sum(s.failed for s in states.values())}


def spending_line(llm: dict[str, Any]) -> str:
    """One line of the live view: tokens and dollars per role and in all."""
    if not llm:
        return ""
    if not llm["roles"]:
        return "LLM: no request made yet"
    parts = [f"{role} {f['tokens']:,} tok ${f['cost_usd']:.4f}" for role, f in llm["roles"].items()]
    total = llm["total"]
    return f"LLM: {' · '.join(parts)} · total {total['tokens']:,} tok ${total['cost_usd']:.4f}"


def spending_table(llm: dict[str, Any] | None) -> Table | None:
    """The closing table of spending per role."""
    if not llm:
        return None
    table = Table(title="LLM spending per role")
    for column in ("role", "calls", "attempts", "prompt tokens", "completion tokens", "cost",
                   "malformed", "failed"):
        table.add_column(column, justify="left" if column == "role" else "right")
    rows = [*llm["roles"].items(), ("total", llm["total"])]
    for role, f in rows:
        table.add_row(role, f"{f['calls']:,}", f"{f['attempts']:,}", f"{f['prompt_tokens']:,}",
                      f"{f['completion_tokens']:,}", f"${f['cost_usd']:.4f}",
                      f"{f['malformed']:,}", f"{f['failures']:,}",
                      style="bold" if role == "total" else None)
    return table
