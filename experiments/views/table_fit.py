"""Tables that fit a console by leaving columns out, never by cutting names or figures."""

from __future__ import annotations

import io
from collections.abc import Callable

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table


def fit(build: Callable[[tuple[str, ...]], Table], columns: tuple[str, ...],
        droppable: tuple[str, ...], width: int | None) -> Table:
    """The table ``build(columns)`` makes, with columns of ``droppable`` left out, in that
    order, until it fits ``width`` characters: a narrow console loses columns, never the
    letters of a name or a figure."""
    table = build(columns)
    if width is None:
        return table
    measure = Console(width=10_000, file=io.StringIO())
    for column in droppable:
        if Measurement.get(measure, measure.options, table).maximum <= width:
            break
        columns = tuple(c for c in columns if c != column)
        table = build(columns)
    return table
