"""``kernelswarm sweep``: the cells of a sweep file searched together on one Ray cluster and one
pool of evaluation workers.

Each cell is a run (run/prepare.py) whose folder lies in the sweep folder. Its ``Swarm`` opens a
cell on the shared ``EvalPool`` (cluster/pool.py), so the pool's workers judge candidates of
every cell, taking turns between the cells with work (cluster/fair_share.py): no worker idles
while a cell waits. A cell's search is driven by a thread of this process (its lineages and
tracker are actors like a run's); ``sweep.concurrent_cells`` bounds how many search at once.

Sweep folder::

    sweep.json           the cells with their whole configurations, the MLflow run's id
    <NN-cell>/           one run folder per cell (summary.json, evaluations/, best/, report/,
                         console.log: what `kernelswarm run` would have printed)
    cells.parquet        one row per cell (results.py)
    workers.json         what each evaluation worker did and when, where it ran, and the
                         summary: busy by minute, evaluations a minute, calibrations
                         (cluster/activity.py)
    sweep.log            Ray's and MLflow's output
    report/              the sweep's report (a cell table and a plot)

``--resume SWEEP_DIR`` runs the cells without a finished ``summary.json``: a cell with records
goes on from them (run --resume's machinery), nothing recorded is evaluated again.
"""

from __future__ import annotations

import concurrent.futures
import enum
import io
import json
import shutil
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from kernelswarm.cluster import (
    ACTIVITY_FILE,
    EvalPool,
    Swarm,
    activity_line,
    connect,
    disconnect,
    write_activity,
)
from kernelswarm.search import StartingKernelFailed, TaskError

from ..agent.llm_view import one_line
from ..config import Config, ConfigError, validate_config
from ..run.execute import confirm_best, record_failed_start, write_outputs
from ..run.log import stderr_to
from ..run.prepare import prepare_run, print_checks, worker_pool
from ..views.progress import LiveView
from ..views.progress import closing_table as run_closing_table
from ..views.sweep_view import sweep_line, sweep_table
from .results import (
    cell_row,
    close_sweep_run,
    closing_table,
    open_sweep_run,
    write_cell_table,
)
from .sweep_file import SweepCell, SweepSpec, cells_from_document

SWEEP_FILE = "sweep.json"
SWEEP_LOG = "sweep.log"
CELL_CONSOLE = "console.log"
INTERRUPTED = "interrupted by the user"
_PREPARING = threading.Lock()


class CellStatus(str, enum.Enum):
    FINISHED = "finished"
    FAILED = "failed"  # the message says why (e.g. its starting kernel fails its task)
    INTERRUPTED = "interrupted"  # stopped by Ctrl-C; --resume goes on from its records
    NOT_RUN = "not run"


@dataclass(frozen=True)
class CellOutcome:
    cell: SweepCell
    status: CellStatus
    run_dir: Path
    message: str = ""
    recorded_before: int = 0  # records a resumed cell had already


@dataclass(frozen=True)
class SweepOutcome:
    sweep_dir: Path
    cells: tuple[CellOutcome, ...]  # every cell, in the sweep's order
    rows: tuple[dict[str, Any], ...]  # cells.parquet's rows
    table: Path
    mlflow_run_id: str

    @property
    def ok(self) -> bool:
        return all(c.status is CellStatus.FINISHED for c in self.cells)


@dataclass
class _Context:
    """What every cell's thread shares: the pool, the stop flag and the live board."""

    sweep_dir: Path
    pool: EvalPool
    mlflow_parent: str
    stop: threading.Event = field(default_factory=threading.Event)
    board: dict[int, dict[str, Any]] = field(default_factory=dict)
    # cells judging their best kernels again: their threads wait on it, the view asks them
    confirming: dict[int, Swarm] = field(default_factory=dict)
    confirming_lock: threading.Lock = field(default_factory=threading.Lock)

    def refresh(self) -> dict[int, dict[str, Any]]:
        """The board, with the figures of the cells confirming brought up to date."""
        with self.confirming_lock:  # a cell that is done confirming writes its own figures
            for index, swarm in list(self.confirming.items()):
                try:
                    self.board[index] = {**swarm.stats(), "state": "confirming"}
                except Exception:  # figures for the view only: the last ones stay
                    pass
        return dict(self.board)


def finished(run_dir: Path) -> bool:
    """A cell whose search ended on its own (an interrupted one has more to do)."""
    summary = run_dir / "summary.json"
    return summary.is_file() and json.loads(summary.read_text()).get("stop_reason") != INTERRUPTED


def _write_doc(sweep_dir: Path, doc: dict[str, Any]) -> None:
    tmp = sweep_dir / f".{SWEEP_FILE}.tmp"
    tmp.write_text(json.dumps(doc, indent=2))
    tmp.replace(sweep_dir / SWEEP_FILE)


def new_sweep_folder(spec: SweepSpec) -> tuple[Path, dict[str, Any]]:
    """A new sweep folder with its ``sweep.json``."""
    sweep_dir = (spec.out_dir / f"{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}-"
                 f"{uuid.uuid4().hex[:4]}").resolve()
    sweep_dir.mkdir(parents=True)
    doc = {"name": spec.name, "experiment": spec.experiment,
           "concurrent_cells": spec.concurrent_cells,
           "base": spec.base.model_dump(mode="json"),
           "cells": [c.document() for c in spec.cells], "mlflow_run_id": ""}
    _write_doc(sweep_dir, doc)
    return sweep_dir, doc


def read_sweep_folder(sweep_dir: Path) -> dict[str, Any]:
    path = sweep_dir / SWEEP_FILE
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{sweep_dir}: not a kernelswarm sweep folder (no {SWEEP_FILE})") from None


def sweep(spec: SweepSpec | None, console: Console | None = None, resume: Path | None = None,
          address: str | None = None) -> SweepOutcome:
    """Run every cell of ``spec`` in a new sweep folder, or, with ``resume``, the unfinished
    cells of that sweep folder; ``address``: the Ray cluster to join (else the base
    configuration's ``cluster.address``, ``RAY_ADDRESS``, or a local instance)."""
    console = console or Console()
    if resume is not None:
        sweep_dir = resume.resolve()
        doc = read_sweep_folder(sweep_dir)
    elif spec is not None:
        sweep_dir, doc = new_sweep_folder(spec)
    else:
        raise ValueError("sweep() needs a SweepSpec or a sweep folder to resume")
    base = validate_config(doc["base"], f"{sweep_dir / SWEEP_FILE}: base")
    cells = cells_from_document(doc, str(sweep_dir / SWEEP_FILE))
    todo = [c for c in cells if not finished(sweep_dir / c.folder)]
    console.print("[bold]kernelswarm sweep[/] " + escape(
        f"{doc['name']} · {len(cells)} cells, {len(todo)} to run"), highlight=False)
    console.print(f"sweep folder (log: {SWEEP_LOG}):", highlight=False)
    console.print(str(sweep_dir), highlight=False, soft_wrap=True, markup=False)
    outcomes = _search_cells(sweep_dir, doc, base, todo, console, address)
    ran = {o.cell.index: o for o in outcomes}
    every = tuple(ran.get(c.index) or CellOutcome(
        c, CellStatus.FINISHED if finished(sweep_dir / c.folder) else CellStatus.NOT_RUN,
        sweep_dir / c.folder) for c in cells)
    return _conclude(sweep_dir, doc, base, every, console)


def _search_cells(sweep_dir: Path, doc: dict[str, Any], base: Config, todo: list[SweepCell],
                  console: Console, address: str | None) -> list[CellOutcome]:
    if not todo:
        return []
    # Ray's and MLflow's output (start-up, shutdown, actors' logs): the log, not the user
    with stderr_to(sweep_dir / SWEEP_LOG):
        cluster = connect(address or base.cluster.address, base.cluster.num_cpus)
        try:
            workers, resources = worker_pool(base, cluster.gpus)
            console.print(f"{workers} evaluation worker(s) shared by the cells · Ray "
                          f"{cluster.address} ({cluster.cpus:g} CPUs, {cluster.gpus:g} GPUs)",
                          highlight=False)
            if base.tracking.mlflow:
                doc["mlflow_run_id"] = open_sweep_run(
                    base.tracking.mlflow_uri, doc["experiment"], doc["name"],
                    {"sweep": doc["name"], "cells": len(doc["cells"]),
                     "sweep_dir": str(sweep_dir)}, doc.get("mlflow_run_id", ""))
                _write_doc(sweep_dir, doc)
            pool = EvalPool(workers, resources)
            try:
                ctx = _Context(sweep_dir, pool, doc["mlflow_run_id"])
                outcomes = _drive(ctx, todo, doc.get("concurrent_cells") or len(todo), console)
                _keep_activity(sweep_dir, pool, console)
                return outcomes
            finally:
                pool.close()
        finally:
            disconnect(cluster)


def _keep_activity(sweep_dir: Path, pool: EvalPool, console: Console) -> None:
    """``workers.json`` (what each worker did and when) and its one-line summary; a resumed
    sweep keeps the earlier sessions' files beside it."""
    activity = pool.activity()
    if activity is None:  # figures about the workers only: the cells' results stand
        console.print("[yellow]worker activity not kept: the evaluation pool did not answer[/]",
                      highlight=False)
        return
    earlier = sweep_dir / ACTIVITY_FILE
    if earlier.is_file():
        earlier.replace(sweep_dir / f"workers-{int(earlier.stat().st_mtime)}.json")
    console.print(activity_line(write_activity(sweep_dir, activity)), highlight=False,
                  markup=False, soft_wrap=True)


def _drive(ctx: _Context, todo: list[SweepCell], at_once: int,
           console: Console) -> list[CellOutcome]:
    """Search the cells, ``at_once`` at a time, showing progress; Ctrl-C stops every
    cell after its lineages' current steps (recorded results are kept)."""
    names = {c.index: c.name for c in todo}
    with concurrent.futures.ThreadPoolExecutor(at_once, "sweep-cell") as threads:
        futures = [threads.submit(_run_cell, ctx, cell) for cell in todo]
        with LiveView(console, lambda s, t: sweep_table(names, s, t),
                      lambda s, t: sweep_line(names, s, t)) as view:
            while True:
                try:
                    _, pending = concurrent.futures.wait(futures, timeout=0.5)
                    view.update(ctx.refresh())
                    if not pending:
                        break
                except KeyboardInterrupt:
                    if not ctx.stop.is_set():
                        console.print("[yellow]interrupted: stopping every cell after its "
                                      "lineages' current steps; recorded results are kept[/]")
                    ctx.stop.set()
        return [f.result() for f in futures]


def crash_summary(exc: BaseException, limit: int = 300) -> str:
    """One line a person can act on for an unexpected exception: the innermost cause (through
    Ray's task errors, whose text is a remote traceback, and ``raise ... from``), its type and
    the first line of its text. The whole traceback goes to the cell's console log."""
    seen: set[int] = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        cause = getattr(exc, "cause", None)
        if not isinstance(cause, BaseException):
            cause = exc.__cause__
        if not isinstance(cause, BaseException):
            break
        exc = cause
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return one_line(text, limit)


def _run_cell(ctx: _Context, cell: SweepCell) -> CellOutcome:
    """One cell's search, start to finish; what it would have printed goes to its folder."""
    run_dir = ctx.sweep_dir / cell.folder
    if ctx.stop.is_set():
        return CellOutcome(cell, CellStatus.NOT_RUN, run_dir, INTERRUPTED)
    console = Console(file=io.StringIO(), width=100)
    ctx.board[cell.index] = {"state": "starting"}
    try:
        outcome = _search_cell(ctx, cell, run_dir, console)
    except (ConfigError, TaskError, StartingKernelFailed) as exc:
        console.print(f"error: {exc}", highlight=False, markup=False)
        outcome = CellOutcome(cell, CellStatus.FAILED, run_dir, one_line(str(exc)))
    except Exception as exc:  # a bug in one cell must not take the others down
        console.print(traceback.format_exc(), highlight=False, markup=False)
        outcome = CellOutcome(cell, CellStatus.FAILED, run_dir,
                              f"crashed: {crash_summary(exc)} (see {CELL_CONSOLE})")
    ctx.board[cell.index] = {**ctx.board.get(cell.index, {}), "state": outcome.status.value}
    if run_dir.is_dir():
        with open(run_dir / CELL_CONSOLE, "a") as log:
            log.write(console.file.getvalue())
    return outcome


def _search_cell(ctx: _Context, cell: SweepCell, run_dir: Path, console: Console) -> CellOutcome:
    recorded = run_dir / "evaluations"
    resume = run_dir if recorded.is_dir() and any(recorded.iterdir()) else None
    if resume is None and run_dir.exists():
        shutil.rmtree(run_dir)  # started but nothing recorded: start it afresh
    with _PREPARING:  # a task's module is imported by path: one cell at a time
        prepared = prepare_run(cell.config, console, resume=resume, run_dir=run_dir)
    print_checks(console, prepared)
    swarm = Swarm(prepared.spec(ctx.pool.size, {}, ctx.mlflow_parent, cell.max_workers),
                  ctx.pool)
    try:
        swarm.start()
    except StartingKernelFailed as exc:
        swarm.abort()
        swarm.finish("the starting kernel failed")
        failed = StartingKernelFailed(prepared.users_file(exc.evaluation))
        record_failed_start(cell.config, prepared, str(failed), keep_folder=True)
        raise failed from None
    except BaseException:
        swarm.abort()
        swarm.finish("the run failed to start")
        raise
    stop_reason = None
    while not swarm.done(timeout=0.5):
        if ctx.stop.is_set() and stop_reason is None:
            swarm.abort()
            stop_reason = INTERRUPTED
        ctx.board[cell.index] = {**swarm.stats(), "state": "searching"}
    ctx.board[cell.index] = {**swarm.stats(), "state": "confirming"}
    search = cell.config.search
    ctx.confirming[cell.index] = swarm
    try:
        confirmation = None if stop_reason else confirm_best(
            swarm, console, search.confirm_top, search.confirm_repeats)
    finally:
        with ctx.confirming_lock:
            ctx.confirming.pop(cell.index, None)
    # its records and worker evaluations, confirmation repeats included: the last live line
    # then counts what the workers' summary line counts
    ctx.board[cell.index] = {**swarm.stats(), "state": "closing"}
    result = swarm.finish(stop_reason, confirmation)
    write_outputs(run_dir, result, prepared.timing, prepared.watch.summary(), prepared.wall_s())
    console.print(run_closing_table(result, prepared.timing.regime, console.width))
    _report(run_dir, cell.config, console)
    status = CellStatus.INTERRUPTED if stop_reason else CellStatus.FINISHED
    return CellOutcome(cell, status, run_dir, stop_reason or result.summary.stop_reason,
                       len(prepared.history))


def _report(folder: Path, config: Config | None, console: Console) -> Path | None:
    """A run's or the sweep's report, logged to the cell's MLflow run; a failure is printed,
    the results stand without it."""
    try:
        from ..report.writer import log_report, write_report

        report = write_report(folder)
        if config is not None and config.tracking.mlflow:
            log_report(report, folder)
        return report.html
    except Exception as exc:  # the report reads what is on disk: the search itself succeeded
        console.print(f"[yellow]report not written:[/] {escape(one_line(str(exc)))}",
                      highlight=False)
        return None


def _conclude(sweep_dir: Path, doc: dict[str, Any], base: Config,
              cells: tuple[CellOutcome, ...], console: Console) -> SweepOutcome:
    """The cell table, the sweep's report and MLflow run, and the closing table."""
    rows = tuple(cell_row(sweep_dir.name, o.cell, o.run_dir, o.status.value,
                          o.message if o.status is not CellStatus.FINISHED else "")
                 for o in cells)
    table = write_cell_table(sweep_dir, rows)
    report = _report(sweep_dir, None, console) if any(
        (o.run_dir / "evaluations").is_dir() for o in cells) else None
    if base.tracking.mlflow and doc.get("mlflow_run_id"):
        files = [table, sweep_dir / SWEEP_FILE, *([report] if report else [])]
        interrupted = any(o.status is not CellStatus.FINISHED for o in cells)
        with stderr_to(sweep_dir / SWEEP_LOG):
            close_sweep_run(base.tracking.mlflow_uri, doc["mlflow_run_id"], rows, files,
                            interrupted)
    console.print(closing_table(doc["name"], rows, console.width))
    for outcome in cells:
        if outcome.status in (CellStatus.FAILED, CellStatus.INTERRUPTED, CellStatus.NOT_RUN):
            console.print(f"cell {outcome.cell.name} {outcome.status.value}: "
                          f"{outcome.message or 'not started'}", highlight=False, markup=False)
    for label, path in (("cells:", table), ("report:", report)):
        if path is not None:
            console.print(label, highlight=False)
            console.print(str(path), highlight=False, soft_wrap=True, markup=False)
    if doc.get("mlflow_run_id"):
        console.print(f"MLflow: experiment {doc['experiment']!r}, sweep run "
                      f"{doc['mlflow_run_id']}", highlight=False, soft_wrap=True, markup=False)
    if not all(o.status is CellStatus.FINISHED for o in cells):
        console.print(f"continue: kernelswarm sweep --resume {sweep_dir}", highlight=False,
                      soft_wrap=True, markup=False)
    return SweepOutcome(sweep_dir, cells, rows, table, doc.get("mlflow_run_id", ""))
