"""The live view of a running sweep: one line per cell (its state, evaluations, best kernel and
the pool's workers it holds), and a status line for logs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text


def _counts(names: Mapping[int, str], board: Mapping[int, Mapping[str, Any]]) -> str:
    states: dict[str, int] = {}
    for index in names:
        state = board.get(index, {}).get("state", "waiting")
        states[state] = states.get(state, 0) + 1
    return ", ".join(f"{n} {state}" for state, n in sorted(states.items()))


def _evaluations(row: Mapping[str, Any]) -> int:
    """A cell's evaluations on the pool's workers this session (confirmation repeats
    included; none for a verdict reused or a kernel that did not build)."""
    return int(row.get("utilisation", {}).get("cell_evaluations", 0))


def sweep_line(names: Mapping[int, str], board: Mapping[int, Mapping[str, Any]],
               elapsed: float) -> str:
    """``  12.0s  cells: 2 searching, 1 waiting  records 14  worker evaluations 12  workers
    busy 87%``: records as the cells' Parquet and the closing table's "records" column count
    them, evaluations as the workers' summary line counts them."""
    records = sum(int(board.get(i, {}).get("records", 0)) for i in names)
    evaluations = sum(_evaluations(board.get(i, {})) for i in names)
    busy = max((float(b.get("utilisation", {}).get("busy_fraction", 0.0))
                for b in board.values()), default=0.0)
    return (f"{elapsed:6.1f}s  cells: {_counts(names, board)}  records {records}  "
            f"worker evaluations {evaluations}  workers busy {busy:.0%}")


def sweep_table(names: Mapping[int, str], board: Mapping[int, Mapping[str, Any]],
                elapsed: float) -> Group:
    table = Table(box=None, pad_edge=False)
    for column in ("cell", "state", "records", "worker evaluations", "best", "workers"):
        table.add_column(column, justify="left" if column in ("cell", "state") else "right",
                         no_wrap=True, overflow="ellipsis", max_width=40 if column == "cell"
                         else None)
    for index, name in names.items():
        row = board.get(index, {})
        held = row.get("utilisation", {}).get("cell_holding")
        table.add_row(escape(name), row.get("state", "waiting"), str(row.get("records", 0)),
                      str(_evaluations(row)), f"{row.get('best', 0.0):.3f}x",
                      "" if held is None else f"{held:g}")
    return Group(Text(sweep_line(names, board, elapsed), style="bold"), table)
