"""``kernelswarm tune TASK [--kernel FILE] --trials N``: an Optuna study over one kernel's knobs.

The knob space is the task's, for the language (``KERNELS[language]["knobs"]`` in its task.py),
plus any ``--knob NAME=V1,V2,...`` (which adds a knob or replaces its values): a kernel reads
its knobs as macros (cpp, cuda, torch-ext) or keyword arguments (triton). A kernel with no
knobs is refused with a message that says how to declare some.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console

from kernelswarm.search import LANGUAGES, kernel_fingerprint, load_task

from ..config import TUNE_DEFAULTS, Config, load_config, load_run_config
from ..evaluation.kernel_file import EvalUsageError, default_device, infer_language
from ..tune.study import TuneError


def add_tune_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "tune", help="tune one kernel's knobs with Optuna, trials in parallel on every GPU",
        description="An Optuna study over one kernel's knobs: up to two trials per evaluation "
                    "worker (one per GPU) in flight, each knob setting evaluated once. The study "
                    "lives in the run folder's optuna.journal (or --storage), resumes, opens in "
                    "optuna-dashboard; trials go to Parquet and MLflow.")
    parser.add_argument("task", metavar="TASK", nargs="?",
                        help="a built-in task name or a task folder (not with --resume)")
    parser.add_argument("--kernel", metavar="FILE",
                        help="the kernel source to tune: a path, or the name of a file in the "
                             "task's folder, e.g. silu_and_mul_unroll.cpp (default: the task's "
                             "starting kernel)")
    parser.add_argument("--language", choices=LANGUAGES,
                        help="the kernel language (default: from FILE's extension, else "
                             "task.language of the configuration, cpp)")
    parser.add_argument("--knob", dest="knobs", action="append", default=[],
                        metavar="NAME=V1,V2,...",
                        help="a knob and its allowed values, added to the task's (repeatable)")
    parser.add_argument("--trials", type=int, metavar="N",
                        help="knob settings to evaluate in this session (required, except with "
                             "--resume, which defaults to the last session's N)")
    parser.add_argument("--storage", metavar="URL",
                        help="the Optuna storage: an RDB URL (sqlite:///study.db, "
                             "postgresql://...) or a journal file (default: the run folder's "
                             "optuna.journal)")
    parser.add_argument("--study-name", metavar="NAME",
                        help="the study (default: <task>-<language>-<kernel hash>); an existing "
                             "study of the same kernel in --storage is continued")
    parser.add_argument("--resume", metavar="RUN_DIR",
                        help="continue the study of an earlier tune run, in its folder; nothing "
                             "evaluated is evaluated again")
    parser.add_argument("--config", metavar="FILE", help="a TOML configuration (its evaluator, "
                        "timing, cluster, tracking and run sections are used)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a setting, e.g. --set "
                                                  "evaluator.workers=2 (repeatable)")
    parser.add_argument("--address", help="the Ray cluster to join (default: $RAY_ADDRESS, else "
                                          "a local instance)")


def _value(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_knobs(items: list[str]) -> dict[str, tuple[Any, ...]]:
    """``NAME=V1,V2,...`` -> {NAME: (V1, V2, ...)}; numbers as numbers."""
    knobs = {}
    for item in items:
        name, _, values = item.partition("=")
        parsed = tuple(_value(v.strip()) for v in values.split(",") if v.strip())
        if not name.strip().isidentifier() or not parsed:
            raise TuneError(f"--knob {item!r}: expected NAME=V1,V2,..., e.g. --knob "
                            f"UNROLL=1,2,4,8")
        if len(set(parsed)) != len(parsed):
            raise TuneError(f"--knob {item!r}: a value is listed twice")
        knobs[name.strip()] = parsed
    return knobs


def _language(args: argparse.Namespace) -> str | None:
    if args.language or not args.kernel:
        return args.language
    try:
        return infer_language(Path(args.kernel), None)
    except EvalUsageError as exc:
        raise TuneError(str(exc)) from None


def kernel_path(given: str, task_folder: Path) -> Path:
    """``--kernel``'s file: a path, else a file of the task's folder by name (its example
    kernels, e.g. silu_and_mul_unroll.cpp, installed with the package)."""
    path = Path(given).expanduser()
    if path.is_file():
        return path
    if path.name == given and (task_folder / given).is_file():
        return task_folder / given
    files = sorted(p.name for p in task_folder.iterdir()
                   if p.is_file() and p.suffix in (".cpp", ".cu", ".py") and p.name != "task.py")
    raise TuneError(f"--kernel {given!r} is not a file, nor a file of the task's folder "
                    f"{task_folder} ({', '.join(files) or 'no kernel files'})")


def _new_config(args: argparse.Namespace) -> Config:
    if not args.task:
        raise TuneError("tune needs TASK (a built-in task name or a task folder), or --resume")
    overrides = [f"task.name={json.dumps(args.task)}"]
    language = _language(args)
    if language:
        overrides.append(f'task.language="{language}"')
    if args.address:
        overrides.append(f"cluster.address={json.dumps(args.address)}")
    overrides += args.overrides
    config = load_config(args.config or TUNE_DEFAULTS, overrides)
    device_given = args.config or any(o.strip().startswith("evaluator.device")
                                      for o in args.overrides)
    if not device_given and default_device(config.task.language) == "cuda":
        config = load_config(args.config or TUNE_DEFAULTS, [*overrides, 'evaluator.device="cuda"'])
    return config


def _new_spec(args: argparse.Namespace, config: Config):
    if args.trials is None:
        raise TuneError("--trials N is required: the number of knob settings to evaluate")
    language = config.task.language
    task = load_task(config.task_path(), config.evaluator.device)
    kernel = task.kernel(language)
    if args.kernel:
        path = kernel_path(args.kernel, task.path)
        source, origin = path.read_text(), str(path.resolve())
    else:
        source, origin = kernel.source, f"{task.name}'s starting {language} kernel"
    space = {**kernel.knobs, **parse_knobs(args.knobs)}
    if not space:
        raise TuneError(
            f"{origin} has no knobs to tune: task {task.name!r} declares none for {language} "
            f"(KERNELS[{language!r}]['knobs'] in its task.py) and no --knob was given. Declare "
            f"them, e.g. --knob UNROLL=1,2,4,8 for a kernel that reads the macro UNROLL "
            f"(a keyword argument for triton)")
    fingerprint = kernel_fingerprint(language, source, space)
    name = args.study_name or f"{task.name}-{language}-{fingerprint[:8]}"
    from ..tune.execute import TuneSpec  # imports Ray and MLflow: after the checks, which are quick

    return TuneSpec(origin, source, space, name, args.storage, args.trials)


def run_tune_command(args: argparse.Namespace, console: Console) -> int:
    """Run the study; 0 when the study has a trial with a correct kernel, 1 otherwise."""
    from ..tune.execute import TuneSpec, tune  # imports Ray and MLflow: keep --help fast

    if args.trials is not None and args.trials < 1:
        raise TuneError("--trials must be at least 1")
    if args.resume:
        given = [flag for flag, value in (("TASK", args.task), ("--kernel", args.kernel),
                                          ("--language", args.language), ("--knob", args.knobs),
                                          ("--storage", args.storage), ("--config", args.config),
                                          ("--study-name", args.study_name)) if value]
        if given:
            raise TuneError(f"--resume takes the task, kernel, knobs and study from the run "
                            f"folder; drop {', '.join(given)} (use --set for settings)")
        run_dir = Path(args.resume)
        overrides = list(args.overrides)
        if args.address:
            overrides.append(f"cluster.address={json.dumps(args.address)}")
        config = load_run_config(run_dir, overrides)
        spec = TuneSpec.read(run_dir, config.task.language, args.trials)
        outcome = tune(config, spec, console, resume=run_dir)
    else:
        config = _new_config(args)
        outcome = tune(config, _new_spec(args, config), console)
    return 0 if outcome.study.best(1) else 1
