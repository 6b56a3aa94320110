"""``kernelswarm run [CONFIG]``: a search, or with ``--dry-run`` what it would do.

The configuration is loaded and checked before Ray, MLflow or torch are imported: a bad key is
refused at once (exit 2, the key named).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from ..run.plan import RunPlan


def add_run_parser(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser(
        "run", help="run a search (the quickstart when no CONFIG is given)",
        description="Run a search. Results go to a new folder under run.out_dir, to Parquet and "
                    "to MLflow.")
    run.add_argument("config", nargs="?", help="a TOML configuration (default: the quickstart)")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a setting, e.g. --set search.lineages=8 or --set "
                          "agent.llm.base_url=http://localhost:8000/v1 (repeatable)")
    run.add_argument("--address", help="the Ray cluster to join (default: $RAY_ADDRESS, else a "
                                       "local instance)")
    run.add_argument("--task", help="a built-in task name or a task folder (sets task.name)")
    run.add_argument("--resume", metavar="RUN_DIR",
                     help="continue a stopped run in its folder with its configuration (plus any "
                          "--set, e.g. a larger search.candidates_per_lineage); nothing recorded "
                          "is evaluated again")
    run.add_argument("--dry-run", action="store_true",
                     help="check the configuration (an LLM agent's endpoints too), the task and "
                          "its starting kernel's build, print what the run would do, and stop: "
                          "no Ray, no run folder, no MLflow run (exit 2 for a bad configuration "
                          "or task, 1 for a starting kernel that does not build)")


def _overrides(args: argparse.Namespace) -> list[str]:
    """``--set`` with ``--address`` and ``--task`` written as the settings they stand for."""
    overrides = list(args.overrides)
    if args.address:
        overrides.append(f'cluster.address="{args.address}"')
    if args.task:
        overrides.append(f"task.name={json.dumps(args.task)}")  # a TOML string, quotes escaped
        if not args.config and not any(o.split("=", 1)[0].strip() == "run.name"
                                       for o in overrides):
            # The quickstart's settings, the user's task: the run folder and the MLflow
            # experiment are named after the task, not "quickstart".
            name = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(args.task.rstrip("/")).name) or "run"
            overrides.append(f"run.name={json.dumps(name)}")
    return overrides


def run_search_command(args: argparse.Namespace, console: Console) -> int:
    from ..config import ConfigError, load_config, load_run_config

    overrides = _overrides(args)
    if args.resume and args.config:
        raise ConfigError("--resume takes the configuration from the run folder; drop CONFIG "
                          "(use --set to change settings)")
    resume = Path(args.resume) if args.resume else None
    config = load_run_config(resume, overrides) if resume else load_config(args.config, overrides)
    from ..agent.roles import check_agent

    check_agent(config)  # an LLM endpoint that cannot serve: refused before Ray is even imported
    if args.dry_run:
        from ..run.plan import plan_run

        print_plan(console, plan_run(config), args.config, resume)
        return 0
    from ..run.ray_start import RayStart

    # Ray starts (4-5 s, one core, mostly waiting on its own processes) while the rest of the
    # run's imports and its preparation take the other core
    ray_start = RayStart(config.cluster.address, config.cluster.num_cpus)
    try:
        from ..run.execute import run  # imports Ray and MLflow: after the configuration is checked

        outcome = run(config, console, resume=resume, ray_start=ray_start)
    finally:
        ray_start.stop()  # run() stops it as it ends; this is for what ends before
    if outcome.failure is not None and not outcome.interrupted:
        # the reason is the last line a user or a script sees
        console.print(f"[red]error:[/] {escape(outcome.failure)}", highlight=False,
                      soft_wrap=True)
    return outcome.exit_status  # 130 after Ctrl-C, as a shell gives a command it stopped


def print_plan(console: Console, plan: RunPlan, config_file: str | None, resume: Path | None) -> None:
    """What ``plan`` (experiments/run/plan.py) says the run would do, one setting a line."""
    config, task = plan.config, plan.task
    search, ev, timing = config.search, config.evaluator, config.timing

    def line(label: str, text: str) -> None:
        console.print(f"{label:<16}{text}", highlight=False, markup=False, soft_wrap=True)

    console.print("[bold]kernelswarm run --dry-run[/]: the configuration, the task and the "
                  "starting kernel are good; nothing was started", highlight=False)
    line("configuration", str(resume / "config.json") if resume else config_file
         or "the quickstart (experiments/quickstart.toml)")
    line("task", f"{task.name} ({task.path}) on {ev.device}: {len(task.tuning_shapes)} tuning "
                 f"shape(s), {len(task.heldout_shapes)} held-out")
    for build in plan.builds:
        how = "from the compile cache" if build.result.cached else \
            f"in {build.result.seconds:.1f} s"
        source = build.file or "the task's source"
        line(f"start ({build.language})", f"{source}: built {how}")
    budget = [f"{search.candidates_per_lineage} candidates"]
    if search.wall_time_s is not None:
        budget.append(f"wall time {search.wall_time_s:g} s (from the search's start, once the "
                      f"starting kernel is judged)")
    line("search", f"{search.lineages} lineage(s) of the {config.agent.kind} agent, "
                   f"strategy {search.strategy}; each stops at {', '.join(budget)}")
    workers = "one per GPU" if ev.workers == "auto" and ev.device == "cuda" else \
        "1" if ev.workers == "auto" else str(ev.workers)
    line("evaluation", f"{workers} worker(s) on {ev.device}, {ev.seeds} seed(s)"
                       f"{', held-out shapes checked' if ev.check_heldout else ''}; timing "
                       f"{timing.budget_s:g} s a shape at most, "
                       f"{'flushed' if timing.flush_cache else 'warm'} cache")
    if search.confirm_top and search.confirm_repeats:
        line("confirmation", f"the best {search.confirm_top} kernel(s) judged "
                             f"{search.confirm_repeats} more times each")
    line("results", str(resume) if resume else
         f"a new folder {config.run.out_dir / (config.run.name + '-<time>-<id>')}")
    if config.tracking.mlflow:
        line("MLflow", f"{config.tracking.mlflow_uri}, experiment "
                       f"'{config.tracking.experiment or config.run.name}'")
    line("Ray", config.cluster.address or "a local instance started for the run"
         + (f" ({config.cluster.num_cpus} CPUs)" if config.cluster.num_cpus else ""))
