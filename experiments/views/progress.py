"""The live view of a running search, and the closing table."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from kernelswarm.cluster import SwarmResult
from kernelswarm.search import NOT_NOVEL, Evaluation

from ..agent.llm_view import one_line, spending_line
from .carried_baselines import MeasuredBaselines, carried_line
from .language_summary import language_lines
from .speedups import (
    baseline_label,
    baseline_names,
    best_text,
    compact_labels,
    speedup_text,
    time_text,
)
from .table_fit import fit


def _status_line(stats: dict[str, Any], elapsed: float) -> str:
    status = dict(stats.get("status", {}))
    # Candidates novelty rejection kept from being judged: an outcome beside the verdicts.
    rejected = (stats.get("population") or {}).get("rejected")
    if rejected:
        status[NOT_NOVEL] = rejected
    counts = ", ".join(f"{k} {v}" for k, v in sorted(status.items()))
    busy = stats.get("utilisation", {}).get("busy_fraction", 0.0)
    line = (f"{elapsed:6.1f}s  evaluations {stats.get('records', 0)}  [{counts}]  "
            f"best {stats.get('best', 0.0):.3f}x  workers busy {busy:.0%}")
    wall_s = (stats.get("budget") or {}).get("wall_s")
    if wall_s:  # the whole search's limit, once here; the lineages' bars count candidates
        line += f"  wall time {elapsed:.0f}/{wall_s:.0f} s"
    llm = stats.get("llm") or {}  # the LLM roles' spending and waits (experiments/agent/llm_view.py)
    waits = "; ".join(f"lineage {n} {text}" for n, text in sorted(llm.get("waiting", {}).items())
                      if n >= 0)
    return line + (f"  {waits}" if waits else "") + (f"\n{spending_line(llm)}" if llm else "")


BAR_WIDTH = 10


def budget_bar(steps: int, budget: Mapping[str, Any]) -> str:
    """How many of a lineage's candidates are spent, as a bar and the count it stands for
    (``███░░░░░░░ 3/10``). One unit for every bar: the search's wall-time limit, the same for
    every lineage, is in the status line above the table."""
    candidates = budget.get("candidates")
    if not candidates:
        return ""
    filled = round(min(1.0, max(0.0, steps / candidates)) * BAR_WIDTH)
    return "█" * filled + "░" * (BAR_WIDTH - filled) + f" {steps}/{candidates}"


def progress_table(stats: dict[str, Any], elapsed: float) -> Group:
    table = Table(box=None, pad_edge=False)
    for column in ("lineage", "candidates", "best", "last move", "last verdict", "model"):
        table.add_column(column, justify="right" if column == "best" else "left",
                         no_wrap=column != "model")
    rows, waiting = stats.get("lineages", {}), (stats.get("llm") or {}).get("waiting", {})
    budget = stats.get("budget") or {}
    # A run searching several languages labels each lineage with its own ("0 cuda").
    several = len({row.get("language") for row in rows.values()} - {None}) > 1
    for lineage in sorted(set(rows) | set(waiting)):
        if lineage < 0:
            continue
        row = rows.get(lineage, {"steps": 0, "best": 0.0, "last_move": "", "last_status": ""})
        label = f"{lineage} {row['language']}" if several and row.get("language") else str(lineage)
        table.add_row(label, budget_bar(row["steps"], budget) or str(row["steps"]),
                      f"{row['best']:.3f}x", escape(row["last_move"]), escape(row["last_status"]),
                      escape(waiting.get(lineage, "")))
    return Group(Text(_status_line(stats, elapsed), style="bold"), table)


Render = Callable[[Mapping[str, Any], float], Any]


class LiveView:
    """A live rich renderable on a terminal; in a log, a status line at the first update, then
    every ``every_s`` seconds, and the last one at the end (so that a short search still shows
    how it went, as the terminal's view did).

    ``table(stats, elapsed)`` draws the terminal view, ``line(stats, elapsed)`` the log line.
    """

    def __init__(self, console: Console, table: Render, line: Render,
                 every_s: float = 10.0) -> None:
        self.console = console
        self.every_s = every_s
        self._table, self._line = table, line
        self._live: Live | None = None
        self._started = time.monotonic()
        self._last_line: float | None = None  # when the log's last line was printed
        self._unprinted: tuple[Mapping[str, Any], float] | None = None  # stats since then

    def __enter__(self) -> LiveView:
        if self.console.is_terminal:
            self._live = Live(console=self.console, refresh_per_second=4, transient=True)
            self._live.__enter__()
        return self

    def update(self, stats: Mapping[str, Any]) -> None:
        elapsed = time.monotonic() - self._started
        if self._live is not None:
            self._live.update(self._table(stats, elapsed))
        elif self._last_line is None or elapsed - self._last_line >= self.every_s:
            self._last_line, self._unprinted = elapsed, None
            self.console.print(self._line(stats, elapsed), highlight=False, markup=False)
        else:
            self._unprinted = (stats, elapsed)

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)
        elif self._unprinted is not None:
            self.console.print(self._line(*self._unprinted), highlight=False, markup=False)


def search_view(console: Console, every_s: float = 10.0) -> LiveView:
    """The live view of a running search."""
    return LiveView(console, progress_table, _status_line, every_s)


LINEAGE_COLUMNS = ("lineage", "steps", "best vs start", "vs best baseline", "candidate",
                   "stopped")
SHAPE_COLUMNS = ("shape", "µs", "best baseline", "baseline µs", "× best", "× eager", "× compile")


def closing_table(result: SwarmResult, regime: str = "", width: int | None = None,
                  measured: MeasuredBaselines | None = None) -> Group:
    """Best speedup per lineage vs the starting kernel and vs the best baseline (``≈``: inside
    the timing noise), then the overall best kernel shape by shape, and in a run of several
    languages each language's best (its lineages are labelled with it); ``regime`` (the cache regime
    of the timing, e.g. "warm cache (not flushed)") goes in the title. ``width``: the tables
    drop columns (stop reasons first; they are printed below the table too) to fit it.
    ``measured``: the baselines' cache entry; the factors their times were carried over by
    are stated under the per-shape table (views/carried_baselines.py)."""
    title = "kernelswarm: best kernel per lineage" + (f" · timed with a {regime}" if regime else "")
    best = dict(result.summary.lineage_best)
    rows: list[tuple[dict[str, str], str | None]] = []
    for lineage in sorted(result.lineages, key=lambda r: r.lineage):
        entry = best.get(lineage.lineage)
        speed, baseline, cid = ("-", "-", "-")
        if entry is not None:
            candidate, evaluation = entry
            speed = speedup_text(evaluation.speedup, evaluation.geomean_ci())
            baseline, cid = best_text(evaluation), candidate.id
        reason = one_line(lineage.stop_reason or "") if not lineage.error else "crashed (see log)"
        label = str(lineage.lineage) + (f" {result.language_of(lineage.lineage)}"
                                        if len(result.starts) > 1 else "")
        rows.append((dict(zip(LINEAGE_COLUMNS, (label, str(lineage.steps), speed,
                                                baseline, cid, reason), strict=True)), None))
    starts = result.starts or ({"": result.start} if result.start is not None else {})
    for language, start in starts.items():
        rows.append(({"lineage": f"start {language}" if len(starts) > 1 else "start",
                      "best vs start": "1.000x", "vs best baseline": best_text(start),
                      "candidate": start.candidate_id}, "dim"))
    if result.summary.best is not None:
        candidate, evaluation = result.summary.best
        confirmed = result.confirmation is not None and result.confirmation.chosen is not None
        is_start = candidate.id in {s.candidate_id for s in starts.values()}
        # a figure not judged again is the search's single (luckiest) measurement: said so
        label = "confirmed" if confirmed else "overall" if is_start else "unconfirmed"
        label = f"{label} {candidate.language}" if len(starts) > 1 else label
        shown = {values["candidate"] for values, _ in rows}
        if is_start:
            label += " = start"  # timed against itself: any figure but 1.0x is noise
        elif candidate.id not in shown and candidate.lineage >= 0:
            # a lineage's runner-up that held up better when judged again
            label += f" (lineage {candidate.lineage})"
        rows.append(({"lineage": label,
                      "best vs start": speedup_text(evaluation.speedup, evaluation.geomean_ci(),
                                                    mark_noise=True),
                      "vs best baseline": best_text(evaluation), "candidate": candidate.id},
                     "bold green"))

    names = baseline_names(*(e for _, e in best.values()), *starts.values(),
                           result.summary.best[1] if result.summary.best else None)
    heading = {"vs best baseline": baseline_label(names)}

    def build(columns: tuple[str, ...]) -> Table:
        table = Table(title=escape(title))
        for column in columns:
            # One line per lineage; the full stop reasons are in summary.json and printed below.
            table.add_column(heading.get(column, column), no_wrap=True, overflow="ellipsis",
                             max_width=40 if column == "stopped" else None)
        for values, style in rows:
            table.add_row(*(escape(values.get(c, "")) for c in columns), style=style)
        return table

    # The candidate column goes last: the best kernel's id is in the per-shape table's title and
    # its file's name too.
    table = fit(build, LINEAGE_COLUMNS, ("stopped", "steps", "candidate"), width)
    if result.summary.best is None:
        return Group(table, *confirmation_lines(result), *language_lines(result))
    candidate, evaluation = result.summary.best
    carried = carried_line(evaluation, measured)  # what the baseline figures were scaled by
    return Group(table, shape_table(evaluation, f"overall best {candidate.id}, per shape", width),
                 *([Text(carried, style="dim")] if carried else []),
                 *confirmation_lines(result), *language_lines(result))


def confirmation_lines(result: SwarmResult) -> list[Text]:
    """What judging the best kernels again after the search found: the reported kernel's
    repeats and the figure the search had, or why no kernel is reported."""
    confirmation = result.confirmation
    if confirmation is None or confirmation.skipped:
        best = result.summary.best
        starts = {s.candidate_id for s in (result.starts or {"": result.start}).values() if s}
        if best is None or best[0].id in starts:
            return []  # nothing to confirm: the starting kernel is timed against itself
        why = confirmation.skipped if confirmation is not None else "not run"
        return [Text(f"unconfirmed: the best kernel was not judged again after the search "
                     f"({why}); its figures are the search's own single measurement, which "
                     f"favours a lucky one", style="yellow")]
    chosen = confirmation.chosen
    if chosen is None:
        reasons = "; ".join(f"{k.candidate.id}: {one_line(k.failure())}"
                            for k in confirmation.kernels)
        return [Text(f"no kernel held up when judged again ({reasons})", style="red")]
    low, high = chosen.spread("speedup")
    seeds = confirmation.seeds
    secret = (f", correctness on {len(seeds.values)} secret seeds"
              if seeds is not None and all(seeds.checked(e) for e in chosen.repeats) else "")
    lines = [Text(f"judged again {len(chosen.repeats)} times after the search{secret}: "
                  f"{chosen.median.speedup:.3f}x vs start (median; {low:.3f}x to {high:.3f}x); "
                  f"the search had measured {chosen.found.speedup:.3f}x")]
    out = [k for k in confirmation.kernels if not k.ok]
    if out:  # faster in the search, out now: say why, or a user wonders where they went
        lines.append(Text("out: " + "; ".join(f"{k.candidate.id}: {one_line(k.failure())}"
                                              for k in out), style="yellow"))
    verdict = gain_verdict(low, high)
    if verdict:
        lines.append(Text(verdict, style="yellow"))
    return lines


def gain_verdict(low: float, high: float) -> str:
    """What the repeats' range of speedups over the starting kernel says when it does not show
    a gain; "" when every repeat was faster."""
    if high < 1.0:
        return "every repeat was slower than the starting kernel: keep the starting kernel"
    if low <= 1.0:
        return "the repeats' range includes 1.0x: no gain over the starting kernel beyond noise"
    return ""


def shape_table(evaluation: Evaluation, title: str, width: int | None = None) -> Table:
    """Per shape: the kernel's median (± IQR), the best baseline by name and its time, the
    speedup over it (``≈`` inside the noise), over eager and over compile. Columns with no
    figure on any shape are left out; ``width``: more are dropped to fit it."""
    labels, common = compact_labels([s.shape for s in evaluation.shapes])
    rows = []
    for s in evaluation.shapes:
        mine = time_text(s.time_us, s.time_spread_us)
        base = time_text(s.best_baseline_us, s.best_baseline_spread_us)
        rows.append(dict(zip(SHAPE_COLUMNS, (
            labels[s.shape], mine, s.best_baseline or "-", base,
            speedup_text(s.speedup_vs_best, s.speedup_vs_best_ci, mark_noise=True),
            speedup_text(s.speedup_vs_eager, s.speedup_vs_eager_ci, mark_noise=True),
            speedup_text(s.speedup_vs_compile, s.speedup_vs_compile_ci, mark_noise=True)),
            strict=True)))
    shown = tuple(c for c in SHAPE_COLUMNS if any(r[c] != "-" for r in rows) or c == "shape")

    def build(columns: tuple[str, ...]) -> Table:
        table = Table(title=escape(f"{title} ({common})" if common else title))
        for column in columns:
            table.add_column(column, no_wrap=column != "shape",
                             justify="left" if column in ("shape", "best baseline") else "right")
        for row in rows:
            table.add_row(*(escape(row[c]) for c in columns))
        return table

    return fit(build, shown, ("× compile", "× eager", "baseline µs", "µs"), width)
