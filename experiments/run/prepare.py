"""A run made ready to search: its folder, its settings and everything its ``SwarmSpec`` holds.

``kernelswarm run`` prepares one run and drives it (execute.py); ``kernelswarm sweep`` prepares
one per cell and drives them together on one pool of evaluation workers (sweep/execute.py).
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from kernelswarm.agents import LLMRoleFactory
from kernelswarm.cluster import LanguageStart, SwarmSpec
from kernelswarm.evaluators import (
    EvaluatorSettings,
    SandboxBuilder,
    SandboxEvaluator,
    TimingSettings,
)
from kernelswarm.search import (
    Budget,
    Candidate,
    Check,
    Evaluation,
    Migration,
    Population,
    Record,
    Roles,
    RunInfo,
    Sink,
    Task,
    language_spec,
    load_task,
)

from ..agent.llm_view import LLMWatch
from ..agent.roles import StartUp, ask_tester, check_agent, configured_roles
from ..config import Config, ConfigError
from ..sinks import MLflowSink, ParquetSink
from .compile_start import first_candidates
from .compiler_messages import naming_the_users_file
from .resume import replay_records, restore_records

CHECKS_FILE = "checks.json"  # the tester's extra checks, as EvaluatorSettings.extra_checks holds

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
        profile_kernels=(config.agent.kind == "llm" if ev.profile_kernels is None
                         else ev.profile_kernels), ncu=ev.ncu, ncu_timeout_s=ev.ncu_timeout_s,
        extra_checks=tuple({"shape": dict(c.shape), "scale": c.scale, "reason": c.reason}
                           for c in checks), **extra)


def search_budget(config: Config) -> Budget:
    search = config.search
    return Budget(candidates=search.candidates_per_lineage, wall_s=search.wall_time_s,
                  gpu_s=search.gpu_time_s, tokens=search.tokens, cost_usd=search.cost_usd,
                  patience=search.patience, target_speedup=search.target_speedup)


def tester_checks(config: Config, task: Task, make_roles: Callable[[int], Roles]) -> StartUp:
    """The tester's checks, asked once for the run (every lineage is judged by the same
    evaluator); with the LLM agent its spending counts against lineage 0's limit."""
    return ask_tester(config, task, make_roles, config.run.seed * 1000)


def print_checks(console: Console, prepared: PreparedRun) -> None:
    """What the tester added to every candidate's checks (or why it added none); printed
    under the run's header, which says what is running."""
    if prepared.tester_failure:
        console.print(f"[yellow]tester failed, no extra checks:[/] "
                      f"{escape(prepared.tester_failure)}", highlight=False)
    if prepared.checks:
        console.print("the tester's extra checks:", highlight=False)
        for c in prepared.checks:  # one per line: a label never wraps into the next
            console.print(f"  {c.label}" + (f" ({c.reason})" if c.reason else ""),
                          highlight=False, markup=False)


def worker_pool(config: Config, gpus: float) -> tuple[int, dict[str, float]]:
    """How many evaluation workers, and the Ray resources of each: one per GPU (``cuda``),
    or ``evaluator.workers`` (one by default) on CPU."""
    device, workers = config.evaluator.device, config.evaluator.workers
    if device == "cuda":
        if gpus < 1:
            raise ConfigError("evaluator.device = \"cuda\" but the Ray cluster has no GPUs")
        return (int(gpus) if workers == "auto" else workers), {"num_gpus": 1, "num_cpus": 1}
    return (1 if workers == "auto" else workers), {"num_cpus": 1}


def result_sinks(config: Config, mlflow_parent: str = "", resumed: bool = False) -> list[Sink]:
    """Parquet always; MLflow when ``tracking.mlflow`` (its runs nested under
    ``mlflow_parent``, a sweep's run, when given; ``resumed``: the run's earlier MLflow runs go
    on)."""
    sinks: list[Sink] = [ParquetSink()]
    if config.tracking.mlflow:
        # A relative SQLite path is anchored at the working folder by the sink, wherever actors run.
        sinks.append(MLflowSink(config.tracking.mlflow_uri,
                                config.tracking.experiment or config.run.name,
                                nested_in=mlflow_parent, resumed=resumed))
    return sinks


def check_languages(config: Config, task: Task) -> None:
    """Refuse, naming ``search.languages``, a language the task has no starting kernel in or
    that does not run on ``evaluator.device``: before a run folder or a worker exists."""
    if config.search.languages is None:
        return  # task.language alone: the task loader and the evaluator say what is wrong
    device = config.evaluator.device
    for language in config.languages:
        if language not in task.kernels:
            raise ConfigError(f"search.languages: task {task.name!r} has no starting kernel in "
                              f"{language!r} (it has: {', '.join(sorted(task.kernels))})")
        if not language_spec(language).runs_on(device):
            raise ConfigError(f"search.languages: {language!r} kernels do not run on "
                              f"evaluator.device = {device!r} (they run on "
                              f"{', '.join(language_spec(language).devices)})")


def roles_for(make_roles: Callable[[int], Roles], language: str) -> Callable[[int], Roles]:
    """``make_roles`` for lineages of ``language``: the LLM agent's prompts name the language
    (and its knob conventions); the built-in roles read it from each candidate."""
    if isinstance(make_roles, LLMRoleFactory) and make_roles.language != language:
        return replace(make_roles, language=language)
    return make_roles


@dataclass(frozen=True)
class PreparedRun:
    """A run's folder with its ``config.json`` and ``timing.json`` written, its records so far
    (a resumed run's), and its agent's roles with the tester's checks."""

    config: Config
    task: Task
    start: Candidate
    run_id: str
    run_dir: Path
    history: tuple[Record, ...]
    seeds: tuple[int, ...]
    checks: tuple[Check, ...]
    make_roles: Callable[[int], Roles]
    timing: TimingSettings
    watch: LLMWatch
    started: float = 0.0  # Unix time the run started: the start-up (``startup_s``) from here
    # The starting kernels of search.languages after the first (``start``'s, the reference).
    more_starts: tuple[Candidate, ...] = ()
    earlier_wall_s: float = 0.0  # a resumed run's wall time in its earlier sessions
    tester_failure: str = ""  # why the tester added no checks, if it failed
    # Per language, kernels its lineages judge first (search.compile_start: compile's kernel).
    first_candidates: Mapping[str, tuple[Candidate, ...]] = field(default_factory=dict)

    def wall_s(self) -> float:
        """The run's wall time so far, its earlier sessions' included."""
        return self.earlier_wall_s + time.time() - self.started

    def spec(self, workers: int, resources: dict[str, float], mlflow_parent: str = "",
             max_workers: int | None = None) -> SwarmSpec:
        """The search's ``SwarmSpec``; a sweep's cell nests its MLflow runs under
        ``mlflow_parent`` and holds at most ``max_workers`` of the pool's workers at once."""
        config, task = self.config, self.task
        search = config.search
        info = RunInfo(run_id=self.run_id, name=config.run.name, run_dir=self.run_dir,
                       task=task.name, language="+".join(config.languages),
                       lineages=search.lineages, params=config.flat())
        settings = evaluator_settings(config, self.checks)
        first, *more = [
            LanguageStart(start, partial(SandboxEvaluator, task.path, start.language, settings),
                          roles_for(self.make_roles, start.language),
                          self.first_candidates.get(start.language, ()),
                          partial(SandboxBuilder, task.path, start.language, settings))
            for start in (self.start, *self.more_starts)]
        return SwarmSpec(
            run=info, sinks=result_sinks(config, mlflow_parent, bool(self.history)),
            start=self.start,
            make_evaluator=first.make_evaluator, more_languages=tuple(more),
            make_roles=first.make_roles, seeds=list(self.seeds), budget=search_budget(config),
            first_candidates=first.first_candidates, make_compiler=first.make_compiler,
            workers=workers, worker_resources=resources, elites=search.elites,
            tuner_journal=self.run_dir / "optuna.journal", history=self.history,
            migration=Migration(search.migration_interval, search.migration_count,
                                search.migration_topology, config.run.seed,
                                config.languages if len(config.languages) > 1 else ()),
            population=population_of(config),
            max_repairs=search.max_repairs, screen_shapes=search.screen_shapes,
            max_workers=max_workers,
            started=self.started,
            # the confirmation checks on as many secret seeds as the search checks its own
            check_seeds=settings.seeds,
            # a restarted tracker rebuilds itself from what the run folder holds
            replay=partial(replay_records, self.run_dir, task.path, config.evaluator.device))

    def users_file(self, evaluation: Evaluation) -> Evaluation:
        return naming_the_users_file(evaluation, self.task, self.start)


def population_of(config: Config) -> Population:
    """The search strategy and its settings as the configuration gives them (the strategy's own
    settings are its ``[search.<strategy>]`` table, where it has one)."""
    search = config.search
    own = getattr(search, search.strategy, None)
    return Population(strategy=search.strategy, elites=search.elites, novelty=search.novelty,
                      options=own.model_dump() if own is not None else {})


def _earlier_wall_s(run_dir: Path, history: list[Record]) -> float:
    """The wall time of a resumed run's earlier sessions: what its summary.json says, or for a
    session that ended before writing one, when its last record came (the search's clock)."""
    try:
        return float(json.loads((run_dir / "summary.json").read_text())["wall_s"])
    except (OSError, ValueError, KeyError, TypeError):
        return max((r.wall_s for r in history), default=0.0)


def _announce_resume(console: Console, config: Config, run_id: str,
                     history: list[Record]) -> None:
    console.print(f"resuming {run_id}: {len(history)} evaluations already recorded",
                  highlight=False)
    done = Counter(r.lineage for r in history if r.lineage >= 0)
    limit = config.search.candidates_per_lineage
    for lineage in range(config.search.lineages):  # what each lineage has left to do
        left = max(0, limit - done[lineage])
        console.print(f"  lineage {lineage}: {done[lineage]} of {limit} steps recorded, "
                      + (f"{left} to go" if left else "nothing to do"), highlight=False)


def prepare_run(config: Config, console: Console,
                make_roles: Callable[[int], Roles] | None = None, resume: Path | None = None,
                run_dir: Path | None = None) -> PreparedRun:
    """A new run folder under ``run.out_dir`` (or at ``run_dir``), or, with ``resume``, that
    run's folder and records; ``make_roles(seed)`` replaces the configured agent."""
    started = time.time()
    if make_roles is None:  # an LLM endpoint that cannot serve: refused before a folder or Ray
        check_agent(config)
    task = load_task(config.task_path(), config.evaluator.device)
    check_languages(config, task)
    start, *more_starts = (task.starting_candidate(language) for language in config.languages)
    if resume is not None:
        run_dir = resume.resolve()
        history = restore_records(run_dir, task)
        _announce_resume(console, config, run_dir.name, history)
        earlier_wall_s = _earlier_wall_s(run_dir, history)
    else:
        if run_dir is None:
            run_id = f"{config.run.name}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
            run_dir = config.run.out_dir / run_id
        run_dir = run_dir.resolve()
        run_dir.mkdir(parents=True)
        history, earlier_wall_s = [], 0.0
    (run_dir / "config.json").write_text(json.dumps(config.model_dump(mode="json"), indent=2))
    timing = TimingSettings.of(evaluator_settings(config))
    timing.write(run_dir)  # what `kernelswarm eval` of this run's files times with
    seeds = [config.run.seed * 1000 + i for i in range(config.search.lineages)]
    make_roles = make_roles or configured_roles(config, task.path, run_dir, seeds)
    start_up = tester_checks(config, task, make_roles)
    # what `kernelswarm eval` of this run's files checks them with
    settings = evaluator_settings(config, start_up.checks)
    (run_dir / CHECKS_FILE).write_text(json.dumps(settings.extra_checks, indent=2))
    firsts = first_candidates(config, task, settings, console, run_dir)
    # the live view says which LLM lineages are still starting (agent/llm_view.py)
    watch = LLMWatch(run_dir, len(seeds) if isinstance(make_roles, LLMRoleFactory) else 0)
    return PreparedRun(config, task, start, run_dir.name, run_dir, tuple(history), tuple(seeds),
                       start_up.checks, start_up.make_roles, timing, watch,
                       started, tuple(more_starts), earlier_wall_s, start_up.failure or "",
                       firsts)
