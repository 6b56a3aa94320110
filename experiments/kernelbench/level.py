"""A whole KernelBench level imported at once: one task folder per problem, and a report.

``kernelswarm tasks import-kernelbench KERNELBENCH [DEST] --level 1`` finds the level's problem
files in a KernelBench checkout (``KernelBench/level1/*.py``, or the level folder itself),
imports each with ``import_problem`` (cpu sizes shrunk, stub kernels) into ``DEST/<problem>``,
and reports every problem it could not take with the reason. Nothing of KernelBench is copied
into kernelswarm: the files are read from the user's checkout.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from kernelswarm.search import TaskError

from .problem import SHRINK, Shrink, import_problem


class ImportStatus(enum.Enum):
    IMPORTED = "imported"
    FAILED = "failed"
    SKIPPED = "skipped"  # its folder already exists


@dataclass(frozen=True)
class ProblemImport:
    """What became of one problem file of the level."""

    problem: str
    status: ImportStatus
    folder: Path
    reason: str = ""
    cpu_sizes: dict[str, tuple[int, int]] = field(default_factory=dict)
    dropped_heldout: tuple[str, ...] = ()


def _number(path: Path) -> tuple[int, str]:
    match = re.match(r"(\d+)", path.name)
    return (int(match.group(1)) if match else 1 << 30, path.name)


def level_files(source: str | Path, level: int) -> list[Path]:
    """The problem files of ``level`` under ``source``, in KernelBench's numbering."""
    source = Path(source).expanduser().resolve()
    candidates = [source / "KernelBench" / f"level{level}", source / f"level{level}", source]
    for folder in candidates:
        files = sorted((p for p in folder.glob("*.py") if p.name != "__init__.py"), key=_number)
        if files and folder.name == f"level{level}":
            return files
    raise TaskError(f"{source}: no level {level} problems found (looked for "
                    f"{', '.join(str(c / '*.py') for c in candidates)})")


def import_level(source: str | Path, level: int, dest: str | Path, *,
                 shrink: Shrink | None = SHRINK, atol: float | None = None,
                 rtol: float | None = None, only: Sequence[str] = ()) -> list[ProblemImport]:
    """Import every problem of the level (or those whose file name starts with one of
    ``only``, e.g. ``"19_"``) into ``dest``; one ``ProblemImport`` per file, in order."""
    dest = Path(dest).expanduser().resolve()
    results = []
    for path in level_files(source, level):
        if only and not any(path.name.startswith(prefix) for prefix in only):
            continue
        folder = dest / path.stem
        if folder.exists():
            results.append(ProblemImport(path.stem, ImportStatus.SKIPPED, folder,
                                         "its folder already exists"))
            continue
        try:
            imported = import_problem(path, folder, shrink=shrink, atol=atol, rtol=rtol)
        except TaskError as exc:
            results.append(ProblemImport(path.stem, ImportStatus.FAILED, folder,
                                         _short(str(exc), path, folder)))
            continue
        except Exception as exc:  # the problem's own code failed: say so and go on
            results.append(ProblemImport(path.stem, ImportStatus.FAILED, folder,
                                         f"{type(exc).__name__}: "
                                         f"{_short(str(exc), path, folder)}"))
            continue
        results.append(ProblemImport(path.stem, ImportStatus.IMPORTED, imported.task.path,
                                     cpu_sizes=dict(imported.cpu_sizes),
                                     dropped_heldout=imported.dropped_heldout))
    return results


def _short(message: str, path: Path, folder: Path) -> str:
    """The message without the problem's and the task's folders, on one line."""
    for where in (folder, path.parent):
        message = message.replace(str(where) + "/", "")
    return " ".join(message.split())[:300]


def level_table(results: Sequence[ProblemImport], level: int) -> Table:
    """The report: every problem not imported with its reason; the imported counted."""
    imported = sum(r.status is ImportStatus.IMPORTED for r in results)
    table = Table(title=f"KernelBench level {level}: {imported} of {len(results)} imported",
                  title_justify="left")
    for column in ("problem", "status", "why / cpu sizes"):
        table.add_column(column, overflow="fold")
    for result in results:
        if result.status is ImportStatus.IMPORTED:
            detail = ", ".join(f"{n} {a}->{b}" for n, (a, b) in result.cpu_sizes.items())
            if result.dropped_heldout:
                detail += f"; {len(result.dropped_heldout)} held-out shape(s) left out (the "
                detail += "model cannot run there)"
            colour = "green"
        else:
            detail, colour = result.reason, "red" if result.status is ImportStatus.FAILED \
                else "yellow"
        table.add_row(escape(result.problem), f"[{colour}]{result.status.value}[/]",
                      escape(detail))
    return table
