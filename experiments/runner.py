"""The experiment runner: a configuration in, a finished search with its results on disk out."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from rich.console import Console

from kernelswarm.cluster import Swarm, SwarmResult, SwarmSpec, connect, disconnect
from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator
from kernelswarm.evaluators.timing_protocol import TimingSettings
from kernelswarm.search import (
    Budget,
    Candidate,
    Check,
    Evaluation,
    Migration,
    Roles,
    RunInfo,
    Sink,
    StartingKernelFailed,
    Task,
    load_task,
)

from .config import Config, ConfigError
from .llm_agent import StartUp, ask_tester, configured_roles
from .llm_view import LLMWatch, one_line, spending_table
from .progress import closing_table, search_view
from .resume import replay_records, restore_records
from .run_log import LOG_NAME, stderr_to
from .sinks import MLflowSink, ParquetSink
from .sinks.sources import self_contained_source, source_file_name
from .speedups import finite, kernel_figures


@dataclass(frozen=True)
class RunOutcome:
    run_dir: Path
    result: SwarmResult
    best_path: Path | None

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


def evaluator_settings(config: Config, checks: tuple[Check, ...] = ()) -> EvaluatorSettings:
    ev, timing = config.evaluator, config.timing
    extra = {"cache_dir": ev.cache_dir.expanduser().resolve()} if ev.cache_dir else {}
    return EvaluatorSettings(
        device=ev.device, compile_timeout_s=ev.compile_timeout_s, run_timeout_s=ev.run_timeout_s,
        seeds=ev.seeds, check_heldout=ev.check_heldout, warmup=timing.warmup,
        min_repeats=timing.min_repeats, max_repeats=timing.max_repeats,
        target_rel_se=timing.target_rel_se, timing_budget_s=timing.budget_s,
        flush_cache=timing.flush_cache, memory_limit_mb=ev.memory_limit_mb,
        cuda_arch=ev.cuda_arch, cuda_graph_below_us=timing.cuda_graph_below_us,
        profile_kernels=ev.profile_kernels, ncu=ev.ncu, ncu_timeout_s=ev.ncu_timeout_s,
        extra_checks=tuple({"shape": dict(c.shape), "scale": c.scale, "reason": c.reason}
                           for c in checks), **extra)


def search_budget(config: Config) -> Budget:
    search = config.search
    return Budget(candidates=search.candidates_per_lineage, wall_s=search.wall_time_s,
                  gpu_s=search.gpu_time_s, tokens=search.tokens, cost_usd=search.cost_usd,
                  patience=search.patience, target_speedup=search.target_speedup)


def tester_checks(config: Config, task: Task, make_roles: Callable[[int], Roles],
                  console: Console) -> StartUp:
    """The tester's checks, asked once for the run (every lineage is judged by the same
    evaluator); with the LLM agent its spending counts against lineage 0's limit."""
    start_up = ask_tester(config, task, make_roles, config.run.seed * 1000)
    if start_up.failure:
        console.print(f"[yellow]tester failed, no extra checks:[/] {start_up.failure}",
                      highlight=False)
    if start_up.checks:
        console.print("the tester's extra checks:", highlight=False)
        for c in start_up.checks:  # one per line: a label never wraps into the next
            console.print(f"  {c.label}" + (f" ({c.reason})" if c.reason else ""),
                          highlight=False)
    return start_up


def worker_pool(config: Config, gpus: float) -> tuple[int, dict[str, float]]:
    device, workers = config.evaluator.device, config.evaluator.workers
    if device == "cuda":
        if gpus < 1:
            raise ConfigError("evaluator.device = \"cuda\" but the Ray cluster has no GPUs")
        return (int(gpus) if workers == "auto" else workers), {"num_gpus": 1, "num_cpus": 1}
    return (1 if workers == "auto" else workers), {"num_cpus": 1}


def _sinks(config: Config) -> list[Sink]:
    sinks: list[Sink] = [ParquetSink()]
    if config.tracking.mlflow:
        # A relative SQLite path is anchored at the working folder by the sink, wherever actors run.
        sinks.append(MLflowSink(config.tracking.mlflow_uri,
                                config.tracking.experiment or config.run.name))
    return sinks


def write_best_kernel(run_dir: Path, candidate: Candidate) -> Path:
    """The best kernel's source as ``run_dir/best/<id>.<ext>``, with the knob values it was
    judged with at the top (self-contained: see experiments/sinks/sources.py); returns its path."""
    path = run_dir / "best" / source_file_name(candidate)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(self_contained_source(candidate))
    return path


def _write_outputs(run_dir: Path, result: SwarmResult, timing: TimingSettings,
                   llm: dict | None = None) -> Path | None:
    summary = result.summary
    best_path = None
    if summary.best is not None:
        best_path = write_best_kernel(run_dir, summary.best[0])
    lineage_best = dict(summary.lineage_best)  # the tracker's: the one per-lineage source
    start_metrics = result.start.metrics if result.start is not None else {}
    doc = {
        "stop_reason": summary.stop_reason, "records": summary.records, "wall_s": summary.wall_s,
        "timing": {**timing.as_dict(), "regime": timing.regime},
        "baselines": start_metrics.get("baselines", {"error": start_metrics.get(
            "baselines_error", "not measured")}),
        "best": None if summary.best is None else {
            "candidate_id": summary.best[0].id, "knobs": summary.best[0].knob_values,
            **kernel_figures(summary.best[1]), "file": str(best_path)},
        "lineages": [{"lineage": r.lineage, "steps": r.steps, "stop_reason": r.stop_reason,
                      "best_candidate": lineage_best[r.lineage][0].id
                      if r.lineage in lineage_best else None,
                      "best_speedup": lineage_best[r.lineage][1].speedup
                      if r.lineage in lineage_best else 0.0,
                      "best_speedup_vs_best_baseline": lineage_best[r.lineage][1].speedup_vs_best
                      if r.lineage in lineage_best else 0.0,
                      "error": r.error} for r in result.lineages],
        "sink_errors": result.sink_errors, "utilisation": result.utilisation,
        "diversity": summary.diversity, "migrations": summary.migrations,
        "reused_verdicts": summary.reused,
        "extra_checks_dropped": dict(start_metrics.get("extra_checks_dropped", {})),
        "llm": llm,  # tokens and dollars per role, lineage and in all (null without LLM roles)
    }
    tmp = run_dir / "summary.json.tmp"
    tmp.write_text(json.dumps(finite(doc), indent=2))
    tmp.replace(run_dir / "summary.json")
    return best_path


def run(config: Config, console: Console | None = None,
        make_roles: Callable[[int], Roles] | None = None,
        resume: Path | None = None) -> RunOutcome:
    """Run the search ``config`` describes; results land under a new run folder, or, with
    ``resume``, continue the run in that folder without re-evaluating what it recorded.

    ``make_roles(seed)`` replaces the configured agent (for agents defined in your own code).
    """
    console = console or Console()
    task = load_task(config.task_path(), config.evaluator.device)
    language = config.task.language
    start = task.starting_candidate(language)
    if resume is not None:
        run_dir = resume.resolve()
        history = restore_records(run_dir, task)
        run_id = run_dir.name
        console.print(f"resuming {run_id}: {len(history)} evaluations already recorded",
                      highlight=False)
        done = Counter(r.lineage for r in history if r.lineage >= 0)
        limit = config.search.candidates_per_lineage
        for lineage in range(config.search.lineages):  # what each lineage has left to do
            left = max(0, limit - done[lineage])
            console.print(f"  lineage {lineage}: {done[lineage]} of {limit} steps recorded, "
                          + (f"{left} to go" if left else "nothing to do"), highlight=False)
    else:
        run_id = f"{config.run.name}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
        run_dir = (config.run.out_dir / run_id).resolve()
        run_dir.mkdir(parents=True)
        history = []
    (run_dir / "config.json").write_text(json.dumps(config.model_dump(mode="json"), indent=2))
    timing = TimingSettings.of(evaluator_settings(config))
    timing.write(run_dir)  # what `kernelswarm eval` of this run's files times with

    seeds = [config.run.seed * 1000 + i for i in range(config.search.lineages)]
    make_roles = make_roles or configured_roles(config, task.path, run_dir, seeds)
    start_up = tester_checks(config, task, make_roles, console)
    checks, make_roles = start_up.checks, start_up.make_roles
    watch = LLMWatch(run_dir)
    with stderr_to(run_dir / LOG_NAME):  # Ray's and MLflow's start-up noise: the log, not the user
        try:
            result = _search(config, console, task, start, run_id, run_dir, seeds, checks,
                             make_roles, history, watch)
        except StartingKernelFailed as exc:
            raise StartingKernelFailed(naming_the_users_file(exc.evaluation, task, start)) from None
    llm = watch.summary()
    best_path = _write_outputs(run_dir, result, timing, llm)
    console.print(closing_table(result, timing.regime, console.width))
    if (spent := spending_table(llm)) is not None:
        console.print(spent)
    outcome = RunOutcome(run_dir, result, best_path)
    _print_locations(console, outcome)
    _report(console, run_dir, config)
    return outcome


def _search(config: Config, console: Console, task: Task, start: Candidate, run_id: str,
            run_dir: Path, seeds: list[int], checks: tuple[Check, ...],
            make_roles: Callable[[int], Roles], history: list, watch: LLMWatch) -> SwarmResult:
    language = config.task.language
    cluster = connect(config.cluster.address, config.cluster.num_cpus)
    try:
        workers, resources = worker_pool(config, cluster.gpus)
        info = RunInfo(run_id=run_id, name=config.run.name, run_dir=run_dir, task=task.name,
                       language=language, lineages=config.search.lineages, params=config.flat())
        spec = SwarmSpec(
            run=info, sinks=_sinks(config), start=start,
            make_evaluator=partial(SandboxEvaluator, task.path, language,
                                   evaluator_settings(config, checks)),
            make_roles=make_roles,
            seeds=seeds,
            budget=search_budget(config),
            workers=workers, worker_resources=resources, elites=config.search.elites,
            tuner_journal=run_dir / "optuna.journal", history=tuple(history),
            migration=Migration(config.search.migration_interval, config.search.migration_count,
                                config.search.migration_topology, config.run.seed),
            max_repairs=config.search.max_repairs,
            replay=partial(replay_records, run_dir, task.path, config.evaluator.device))
        console.print(f"[bold]kernelswarm[/] {task.name} ({language}) · {config.search.lineages} "
                      f"lineages · {workers} evaluation worker(s) · Ray {cluster.address} "
                      f"({cluster.cpus:g} CPUs, {cluster.gpus:g} GPUs)")
        _print_path(console, "run folder (log: run.log):", run_dir)
        budget = {"candidates": config.search.candidates_per_lineage,
                  "wall_s": config.search.wall_time_s}
        return _drive(Swarm(spec), console, watch, budget)
    finally:
        disconnect(cluster)


def naming_the_users_file(evaluation: Evaluation, task: Task, start: Candidate) -> Evaluation:
    """The starting kernel's evaluation with the compiler's name for it (``kernel.cpp``, the
    file the evaluator builds) replaced by the task folder's file holding that source, so that
    ``kernel.cpp:12:5: error`` reads ``/home/me/tasks/my_op/my_op.cpp:12:5: error``. The
    evaluator builds the source as it is, so line numbers agree."""
    own = [f for f in sorted(task.path.iterdir()) if f.is_file() and f.suffix != ".pyc"
           and f.stat().st_size == len(start.source.encode()) and f.read_text() == start.source]
    if not own:
        return evaluation
    pattern = re.compile(r"(?<![\w/.])kernel\.(cpp|cu|py)\b")
    return replace(evaluation, message=pattern.sub(str(own[0]), evaluation.message))


def _print_path(console: Console, label: str, path: object) -> None:
    """A label, then the path whole on its own line (never wrapped or cut by the console)."""
    console.print(label, highlight=False)
    console.print(str(path), highlight=False, soft_wrap=True, markup=False)


def _report(console: Console, run_dir: Path, config: Config) -> None:
    """Write the run's report and log it to the MLflow parent run; a failure is printed, the
    run's results stand without it."""
    try:
        from .report import log_report, write_report

        report = write_report(run_dir)
        if config.tracking.mlflow:
            log_report(report, run_dir)
    except Exception as exc:  # the report reads what is on disk: the run itself succeeded
        console.print(f"[yellow]report not written:[/] {one_line(str(exc))}", highlight=False)
        return
    _print_path(console, "report:", report.html)


def _drive(swarm: Swarm, console: Console, watch: LLMWatch | None = None,
           budget: dict[str, float | None] | None = None) -> SwarmResult:
    """Start the swarm, show progress until every lineage stops; Ctrl-C stops it cleanly.
    ``watch``: the LLM roles' waits and spending for the view, their failures printed."""
    stop_reason = None
    try:
        swarm.start()
        with search_view(console) as view:
            while not swarm.done(timeout=0.5):
                stats = swarm.stats()
                stats["budget"] = budget or {}
                if watch is not None:
                    stats["llm"] = watch.stats()
                    watch.echo(console)
                view.update(stats)
        if watch is not None:
            watch.echo(console)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: stopping lineages after their current step; "
                      "recorded results are kept[/]")
        swarm.abort()
        stop_reason = "interrupted by the user"
    except Exception:
        swarm.abort()
        swarm.finish("the run failed to start")
        raise
    return swarm.finish(stop_reason)


def _print_locations(console: Console, outcome: RunOutcome) -> None:
    result = outcome.result
    dropped = result.start.metrics.get("extra_checks_dropped", {}) if result.start else {}
    for label, why in dropped.items():
        console.print(f"[yellow]extra check {label} dropped:[/] {why}", highlight=False)
    baselines = result.start.metrics.get("baselines", {}) if result.start else {}
    for name, why in baselines.get("skipped", {}).items():
        console.print(f"baseline {name} skipped: {why}", highlight=False)
    if result.start is not None and result.start.metrics.get("baselines_error"):
        console.print(f"[red]baselines not measured:[/] "
                      f"{result.start.metrics['baselines_error']}", highlight=False)
    for lineage in sorted(result.lineages, key=lambda r: r.lineage):
        if lineage.stop_reason and not lineage.error:
            console.print(f"lineage {lineage.lineage} stopped: {one_line(lineage.stop_reason)}",
                          highlight=False)
    for lineage in result.lineages:
        if lineage.error:
            console.print(f"[red]lineage {lineage.lineage} crashed:[/]\n{lineage.error}")
    for error in result.sink_errors:
        console.print(f"[red]{error}[/]")
    for location in result.locations:
        _print_path(console, "results:", location)
    if outcome.best_path:
        _print_path(console, "best kernel:", outcome.best_path)
