"""``kernelswarm run``: a configuration in, a finished search with its results on disk out."""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from kernelswarm.cluster import ClusterInfo, Swarm, SwarmResult, connect, disconnect
from kernelswarm.search import (
    Confirmation,
    Evaluation,
    Roles,
    StartingKernelFailed,
)

from ..agent.llm_view import LLMWatch, one_line, spending_table
from ..config import Config
from ..views.progress import closing_table, search_view
from .build_ahead import build_starts_ahead

# write_best_kernel, write_outputs, evaluator_settings and search_budget are re-exported: other
# modules and tests import them from here.
from .log import LOG_NAME, stderr_to
from .outputs import measured_baselines, write_outputs
from .outputs import write_best_kernel as write_best_kernel
from .phases import PhaseLog
from .prepare import PreparedRun, prepare_run, print_checks, worker_pool
from .prepare import evaluator_settings as evaluator_settings
from .prepare import search_budget as search_budget
from .ray_start import RayStart

INTERRUPTED = "interrupted by the user"
INTERRUPTED_STATUS = 130  # a shell's status for a command stopped by Ctrl-C (128 + SIGINT)


# What writing the report and logging it to MLflow import (matplotlib, MLflow, pyarrow.dataset
# with pandas: 2-4 s of CPU on a small machine). They are imported on a thread while the best
# kernels are confirmed, when the driver only waits and a core is free, instead of after.
REPORT_MODULES = ("kernelswarm.experiments.report.writer", "kernelswarm.experiments.report.plots",
                  "pyarrow.dataset", "mlflow", "mlflow.entities")


def import_in_background(modules: tuple[str, ...]) -> threading.Thread:
    """Import ``modules`` on a daemon thread; one that fails is left for its user to report."""
    def load() -> None:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - the code that needs it says what is wrong
                pass

    thread = threading.Thread(target=load, name="report-imports", daemon=True)
    thread.start()
    return thread


@dataclass(frozen=True)
class RunOutcome:
    run_dir: Path
    result: SwarmResult
    best_path: Path | None
    interrupted: bool = False  # Ctrl-C stopped the search or its confirmation

    @property
    def exit_status(self) -> int:
        """What ``kernelswarm run`` exits with: 130 after Ctrl-C (whatever was kept), 1 when
        no kernel was found correct or no lineage proposed one, else 0."""
        if self.interrupted:
            return INTERRUPTED_STATUS
        return 0 if self.failure is None and self.result.summary.best is not None else 1

    @property
    def failure(self) -> str | None:
        """Why the run produced nothing, when no lineage proposed a single candidate (every
        agent request failed, say); None otherwise."""
        lineages = self.result.lineages
        if not lineages or any(r.steps > 0 for r in lineages):
            return None
        reasons = dict.fromkeys(one_line(r.stop_reason or "no reason given") if not r.error
                                else "crashed" for r in lineages)
        return "no lineage proposed a candidate: " + "; ".join(reasons)


def run(config: Config, console: Console | None = None,
        make_roles: Callable[[int], Roles] | None = None,
        resume: Path | None = None, ray_start: RayStart | None = None) -> RunOutcome:
    """Run the search ``config`` describes; results land under a new run folder, or, with
    ``resume``, continue the run in that folder without re-evaluating what it recorded.

    ``make_roles(seed)`` replaces the configured agent (for agents defined in your own code);
    ``ray_start``: Ray started already for ``config.cluster`` (else it is started here, once the
    run is prepared), stopped by this run.
    """
    console = console or Console()
    phases = PhaseLog()  # run.log's [phase] lines: where the run's time went
    phases.mark("configuration loaded")
    try:
        prepared = prepare_run(config, console, make_roles, resume)
    except BaseException:
        if ray_start is not None:
            ray_start.stop()
        raise
    run_dir = prepared.run_dir
    phases.attach(run_dir / LOG_NAME)
    phases.mark("run folder ready")
    # Triton starts' device code, built while Ray starts and the first start is judged (a
    # build left running as the run ends finishes into the cache on its own)
    build_starts_ahead(prepared.task.path, (prepared.start, *prepared.more_starts),
                       prepared.first_candidates, evaluator_settings(config, prepared.checks))
    if ray_start is not None:
        ray_start.ready()  # stderr back from it before run.log takes it
    # Ray's and MLflow's noise goes to the log, not the user, until Ray has stopped: a local
    # instance stops (1-2 s) while the summary and the report are written, which need no Ray
    stopping: list[threading.Thread] = []
    with stderr_to(run_dir / LOG_NAME):
        try:
            result, interrupted = _search(console, prepared, phases, stopping, ray_start)
            if (start := result.failed_start) is not None:
                raise stopped_by_start(config, prepared, result, start)
            llm = prepared.watch.summary()
            timing = prepared.timing
            best_path = write_outputs(run_dir, result, timing, llm, prepared.wall_s())
            phases.mark("summary written")
            console.print(closing_table(result, timing.regime, console.width,
                                        measured_baselines(run_dir, result)))
            if (spent := spending_table(llm)) is not None:
                console.print(spent)
            outcome = RunOutcome(run_dir, result, best_path, interrupted)
            if outcome.failure is not None and not interrupted:  # exit 1: MLflow FAILED, why
                record_failed_start(config, prepared, outcome.failure, keep_folder=True)
            _print_locations(console, outcome)
            _report(console, run_dir, config)
            phases.mark("report written")
        finally:
            for thread in stopping:
                thread.join()
    if interrupted:  # the last words: what the figures are worth and how to finish them
        console.print(f"[yellow]interrupted:[/] the figures above are unconfirmed; to go on "
                      f"and confirm them: kernelswarm run --resume {escape(str(run_dir))}",
                      highlight=False, soft_wrap=True)
    return outcome


def stopped_by_start(config: Config, prepared: PreparedRun, result: SwarmResult,
                     start: Evaluation) -> StartingKernelFailed:
    """A run stopped by its starting kernel's verdict ``start``: its folder is kept, with a
    summary.json whose stop reason says why, and its MLflow runs are FAILED; what to raise."""
    failed = StartingKernelFailed(prepared.users_file(start))
    result = replace(result, summary=replace(result.summary, stop_reason=str(failed)))
    write_outputs(prepared.run_dir, result, prepared.timing, prepared.watch.summary(),
                  prepared.wall_s())
    record_failed_start(config, prepared, str(failed), keep_folder=True)
    return failed


def record_failed_start(config: Config, prepared: PreparedRun, reason: str,
                        keep_folder: bool) -> None:
    """Mark the run's MLflow runs FAILED, saying why (the sinks closed them as finished)."""
    if not config.tracking.mlflow:
        return
    from ..sinks.mlflow_runs import mark_failed

    if not keep_folder:
        reason += " (its run folder was removed: nothing was searched)"
    mark_failed(config.tracking.mlflow_uri, config.tracking.experiment or config.run.name,
                prepared.run_id, str(prepared.run_dir), reason)


def _search(console: Console, prepared: PreparedRun, phases: PhaseLog | None = None,
            stopping: list[threading.Thread] | None = None,
            ray_start: RayStart | None = None) -> tuple[SwarmResult, bool]:
    """The search's result, and whether Ctrl-C stopped it. With ``stopping``, a local Ray
    instance is stopped on a thread appended to it (the caller joins it), else before this
    returns. ``ray_start``: Ray started already (else connected here)."""
    config, task, watch = prepared.config, prepared.task, prepared.watch
    language = " + ".join(config.languages)
    phases = phases or PhaseLog()
    if ray_start is None:
        cluster = connect(config.cluster.address, config.cluster.num_cpus)
    else:
        started = ray_start.ready()
        cluster = started.info
        sys.stderr.write(started.held)  # Ray's start-up warnings, to run.log
    phases.mark("ray started")
    try:
        workers, resources = worker_pool(config, cluster.gpus)
        spec = prepared.spec(workers, resources)
        console.print("[bold]kernelswarm[/] " + escape(
            f"{task.name} ({language}) · {config.search.lineages} lineages · {workers} "
            f"evaluation worker(s)"))
        console.print(f"Ray {cluster.address} ({cluster.cpus:g} CPUs, {cluster.gpus:g} GPUs)",
                      highlight=False)
        _print_path(console, "run folder (log: run.log):", prepared.run_dir)
        print_checks(console, prepared)
        budget = {"candidates": config.search.candidates_per_lineage,
                  "wall_s": config.search.wall_time_s}
        swarm = Swarm(spec)
        phases.mark("actors created")
        return _drive(swarm, console, watch, budget,
                      (config.search.confirm_top, config.search.confirm_repeats), phases)
    finally:
        if stopping is None:
            _disconnect(cluster, phases, ray_start)
        else:
            stopping.append(threading.Thread(target=_disconnect,
                                             args=(cluster, phases, ray_start),
                                             name="ray-shutdown"))
            stopping[-1].start()


def _disconnect(cluster: ClusterInfo, phases: PhaseLog, ray_start: RayStart | None) -> None:
    if ray_start is None:
        disconnect(cluster)
    else:
        ray_start.stop()  # by the thread that started it
    phases.mark("ray stopped")


def _print_path(console: Console, label: str, path: object) -> None:
    """A label, then the path whole on its own line (never wrapped or cut by the console)."""
    console.print(label, highlight=False)
    console.print(str(path), highlight=False, soft_wrap=True, markup=False)


def _report(console: Console, run_dir: Path, config: Config) -> None:
    """Write the run's report and log it to the MLflow parent run; a failure is printed, the
    run's results stand without it."""
    try:
        from ..report.writer import log_report, write_report

        report = write_report(run_dir)
        if config.tracking.mlflow:
            log_report(report, run_dir)
    except Exception as exc:  # the report reads what is on disk: the run itself succeeded
        console.print(f"[yellow]report not written:[/] {escape(one_line(str(exc)))}",
                      highlight=False)
        return
    _print_path(console, "report:", report.html)


def _drive(swarm: Swarm, console: Console, watch: LLMWatch | None = None,
           budget: dict[str, float | None] | None = None,
           confirm: tuple[int, int] = (0, 0),
           phases: PhaseLog | None = None) -> tuple[SwarmResult, bool]:
    """Start the swarm, show progress until every lineage stops, then confirm the best kernels
    (``confirm``: how many, how many repeats each); Ctrl-C stops it cleanly. The result, and
    whether Ctrl-C stopped the search or its confirmation.
    ``watch``: the LLM roles' waits and spending for the view, their failures printed;
    ``phases``: where each step's end is marked."""
    phases = phases or PhaseLog()
    stop_reason = None
    confirmation = None
    interrupted = False
    try:
        swarm.start()
        phases.mark("starting kernel judged")
        _startup_line(console, swarm.startup_s, (budget or {}).get("wall_s"))
        with search_view(console) as view:
            while not swarm.done(timeout=0.5):
                stats = swarm.stats()
                stats["budget"] = budget or {}
                if watch is not None:
                    stats["llm"] = watch.stats()
                    watch.echo(console)
                view.update(stats)
        phases.mark("search ended")
        import_in_background(REPORT_MODULES)
        if watch is not None:
            watch.echo(console)
        confirmation, interrupted = _confirm(swarm, console, *confirm)
        phases.mark("best kernels confirmed")
    except StartingKernelFailed as failed:  # the search ends with the start's verdict
        swarm.abort()
        stop_reason = str(failed)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: stopping lineages after their current step; "
                      "recorded results are kept[/]")
        swarm.abort()
        stop_reason, interrupted = INTERRUPTED, True
        confirmation = not_confirmed(f"{INTERRUPTED} during the search", confirm[1])
    except Exception:
        swarm.abort()
        swarm.finish("the run failed to start")
        raise
    result = swarm.finish(stop_reason, confirmation)
    phases.mark("sinks closed")
    return result, interrupted


def _startup_line(console: Console, startup_s: float, wall_s: float | None) -> None:
    """One line where the run's start-up took longer than the search's own wall-time budget,
    which counts from the end of it (the start-up is summary.json's ``startup_s``)."""
    if wall_s and startup_s > wall_s:
        console.print(f"[yellow]start-up took {startup_s:.0f} s (Ray, calibration, the starting "
                      f"kernel's verdict), longer than the search's own {wall_s:g} s "
                      f"(search.wall_time_s), which counts from now[/]", highlight=False)


def not_confirmed(why: str, repeats: int = 0) -> Confirmation:
    """A confirmation that did not run, saying why: the run's best keeps the search's own
    figures, and every table, summary.json and MLflow label them unconfirmed."""
    return Confirmation(repeats, (), None, 0.0, why)


def confirm_best(swarm: Swarm, console: Console, top: int,
                 repeats: int) -> Confirmation | None:
    """The search's ``top`` kernels judged ``repeats`` more times each (search/confirm.py);
    skipped, with the reason, when turned off. Ctrl-C here keeps the search's own figures,
    labelled unconfirmed. A sweep's cell does the same; other cells' candidates share the
    workers meanwhile, each evaluation still timed alone on its worker."""
    return _confirm(swarm, console, top, repeats)[0]


def _confirm(swarm: Swarm, console: Console, top: int,
             repeats: int) -> tuple[Confirmation, bool]:
    """``confirm_best``'s confirmation, and whether Ctrl-C cut it short."""
    if top <= 0 or repeats <= 0:
        return not_confirmed("turned off (search.confirm_top or search.confirm_repeats is "
                             "0)"), False

    def announce(kernels: int) -> None:
        console.print(f"confirming the best {kernels} kernel(s): {repeats} more evaluations "
                      f"each", highlight=False)

    try:
        return swarm.confirm(top, repeats, announce), False
    except KeyboardInterrupt:
        console.print("[yellow]confirmation interrupted: the search's own figures are "
                      "reported, unconfirmed[/]")
        return not_confirmed(f"{INTERRUPTED} during the confirmation", repeats), True


def _print_locations(console: Console, outcome: RunOutcome) -> None:
    result = outcome.result
    start = result.start
    dropped = start.dropped_checks if start is not None else {}
    for label, why in dropped.items():
        console.print(f"[yellow]extra check {escape(label)} dropped:[/] {escape(why)}",
                      highlight=False)
    baselines = start.baselines if start is not None else None
    for name, why in (baselines.skipped if baselines is not None else {}).items():
        console.print(f"baseline {name} skipped: {why}", highlight=False, markup=False)
    if baselines is not None and baselines.error:
        console.print(f"[red]baselines not measured:[/] {escape(baselines.error)}",
                      highlight=False)
    for lineage in sorted(result.lineages, key=lambda r: r.lineage):
        if lineage.stop_reason and not lineage.error:
            console.print(f"lineage {lineage.lineage} stopped: {one_line(lineage.stop_reason)}",
                          highlight=False, markup=False)
    for lineage in result.lineages:
        if lineage.restarts:
            console.print(f"[yellow]lineage {lineage.lineage} restarted from its records "
                          f"{lineage.restarts} time(s) after a crash:[/] "
                          f"{escape(one_line(lineage.crashes[-1].strip().splitlines()[-1], 200))}",
                          highlight=False)
        if lineage.error:
            console.print(f"[red]lineage {lineage.lineage} crashed:[/]\n{escape(lineage.error)}",
                          highlight=False)
    for error in result.sink_errors:
        console.print(f"[red]{escape(error)}[/]", highlight=False)
    for location in result.locations:
        if Path(location).is_dir():  # the Parquet dataset's folder
            _print_path(console, "evaluations (Parquet):", location)
        else:  # the sink says what it is (MLflow: its store, experiment, run, how to browse)
            console.print(location, highlight=False, soft_wrap=True, markup=False)
    if outcome.best_path:
        _print_path(console, "best kernel:", outcome.best_path)
