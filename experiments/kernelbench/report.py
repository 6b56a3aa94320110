"""The KernelBench benchmark's figures: a row per problem, fast_p, geomeans and the table."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

P_VALUES = (1.0, 1.5)


@dataclass(frozen=True)
class ProblemResult:
    """One problem of the subset: whether its best kernel is correct, and how fast."""

    problem: str
    status: str  # "ok", or why there is no correct kernel
    speedup_vs_eager: float = math.nan
    speedup_vs_compile: float = math.nan
    speedup_vs_start: float = math.nan
    evaluations: int = 0
    best_move: str = ""
    run_dir: str = ""
    start: str = ""  # "given" (from --starts) or "compiled" (from torch.compile)
    wall_s: float = math.nan  # the problem's process, start to end
    slot: str = ""  # where it ran ("gpu 2")

    @classmethod
    def of_row(cls, row: dict[str, Any]) -> ProblemResult:
        """A row of results.jsonl (JSON: NaN written as null) back as a result."""
        known = {f.name: f for f in fields(cls)}
        values = {k: (math.nan if v is None and known[k].type == "float" else v)
                  for k, v in row.items() if k in known}
        return cls(**values)

    @property
    def correct(self) -> bool:
        return self.status == "ok"


def geomean(values: list[float]) -> float:
    """The geometric mean of the finite positive values; NaN when there are none."""
    good = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, good)) / len(good)) if good else math.nan


def fast_p(results: list[ProblemResult], p: float, field: str) -> float:
    """The share of all problems whose best kernel is correct and more than ``p`` times faster
    than the baseline ``field`` names; NaN when no problem has that baseline measured."""
    if not results or all(math.isnan(getattr(r, field)) for r in results if r.correct):
        return math.nan
    fast = sum(1 for r in results if r.correct and getattr(r, field) > p)
    return fast / len(results)


def summarise(results: list[ProblemResult]) -> dict[str, Any]:
    """fast_p and geomeans over eager and compile, and how many problems are correct."""
    correct = [r for r in results if r.correct]
    figures: dict[str, Any] = {"problems": len(results), "correct": len(correct)}
    for baseline in ("eager", "compile"):
        field = f"speedup_vs_{baseline}"
        for p in P_VALUES:
            figures[f"fast_{p:g}_vs_{baseline}"] = fast_p(results, p, field)
        values = [getattr(r, field) for r in correct]
        figures[f"geomean_vs_{baseline}"] = geomean(values)
        figures[f"geomean_vs_{baseline}_over"] = sum(1 for v in values if v > 0)
    return figures


def x_times(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.2f}x"


def _share(value: float) -> str:
    return "not measured" if math.isnan(value) else f"{value:.0%}"


def table(report: dict[str, Any]) -> str:
    """The report as markdown: the figures, then one row per problem."""
    s = report["summary"]
    software = ", ".join(f"{k} {v}" for k, v in report["versions"].items())
    lines = [f"### KernelBench level {report['level']}: {s['problems']} problems, "
             f"{report['language']} on {report['versions']['device']}", "",
             f"Command: `{report['command']}`", "", f"Software: {software}.", "",
             "| baseline | fast_1.0 | fast_1.5 | geomean (over correct problems) |",
             "|---|---|---|---|"]
    for baseline in ("eager", "compile"):
        lines.append(f"| {baseline} | {_share(s[f'fast_1_vs_{baseline}'])} | "
                     f"{_share(s[f'fast_1.5_vs_{baseline}'])} | "
                     f"{x_times(s[f'geomean_vs_{baseline}'])} "
                     f"({s[f'geomean_vs_{baseline}_over']} of {s['problems']}) |")
    lines += ["", f"{s['correct']} of {s['problems']} problems have a correct kernel.", "",
              "| problem | start | status | vs eager | vs compile | vs start | evaluations | "
              "best move | wall |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in report["problems"]:
        wall = r.get("wall_s")
        lines.append(f"| {r['problem']} | {r.get('start') or '—'} | {r['status']} | "
                     f"{x_times(r['speedup_vs_eager'])} | "
                     f"{x_times(r['speedup_vs_compile'])} | {x_times(r['speedup_vs_start'])} | "
                     f"{r['evaluations']} | {r['best_move'] or '—'} | "
                     f"{'—' if wall is None or wall != wall else f'{wall:.0f} s'} |")
    return "\n".join(lines)


def finite(value: Any) -> Any:
    """``value`` with NaN as None, recursively (JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value
