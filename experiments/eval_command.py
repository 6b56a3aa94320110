"""``kernelswarm eval TASK CANDIDATE_FILE``: judge one kernel file against a task, once.

The file is evaluated exactly as a search would evaluate a candidate (screen, build, sandbox,
correctness on every tuning and held-out shape, timing interleaved with the task's starting
kernel, speedups over the baselines of evaluators/baselines.py) and the verdict is printed as a
table, or as JSON with ``--json``. A file with a knob header (every file a run writes) is built
with those knob values. A file from a run folder (``RUN_DIR/best/<id>.<ext>`` or
``RUN_DIR/candidates/<id>.<ext>``), or ``--run RUN_DIR`` (its best kernel), is judged with that
run's task, language, device and timing settings (``timing.json``), and the run's own figure is
shown next to the new one. Exit status: 0 when the kernel is OK, 1 for any other verdict, 2 for
arguments that cannot be used (an unknown task, a missing file, a language the task has no
starting kernel for), each named in the message.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kernelswarm.agents.builtin import RuleTester
from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator
from kernelswarm.evaluators.timing_protocol import TimingSettings
from kernelswarm.search import (
    LANGUAGES,
    SUFFIX_LANGUAGES,
    Candidate,
    Evaluation,
    Origin,
    Status,
    Task,
    TaskError,
    UnknownLanguage,
    language_spec,
    load_task,
    median_evaluation,
    spec_for_suffix,
)

from .compiler_messages import naming_the_file
from .config import BUILTIN_TASKS, ConfigError
from .run.folder import RunFolder, open_run_folder, run_folder_of
from .sinks.sources import read_kernel_file
from .views.speedups import baseline_names, compact_labels, speedup_text
from .views.table_fit import fit


class EvalUsageError(Exception):
    """Arguments of ``kernelswarm eval`` that cannot be used; the message names which."""


def add_eval_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "eval", help="evaluate one kernel file against a task (does it beat the baseline?)",
        description="Evaluate CANDIDATE_FILE as a candidate of TASK: screen, build, check on "
                    "every shape, time against the task's starting kernel and PyTorch. Exit "
                    "status 0 when OK, 1 for any other verdict, 2 for unusable arguments.")
    parser.add_argument("files", metavar="[TASK] CANDIDATE_FILE", nargs="*",
                        help="a built-in task name or a task folder, and the kernel's source "
                             "file; a file from a run folder needs no TASK")
    parser.add_argument("--run", metavar="RUN_DIR", type=Path,
                        help="judge the best kernel of this run folder with its settings")
    parser.add_argument("--language", choices=LANGUAGES,
                        help="the kernel language (default: from the file's extension: "
                             + ", ".join(f"{s} -> {spec.name}"
                                         for s, spec in SUFFIX_LANGUAGES.items()) + ")")
    parser.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda where the language "
                                         "runs there and nvidia-smi finds a GPU, else cpu)")
    parser.add_argument("--json", action="store_true", help="print the evaluation as JSON")
    parser.add_argument("--repeats", type=int, metavar="N",
                        help="judge the kernel N times (a fresh sandbox each) and report the "
                             "median, with the range; any failing repeat is the verdict "
                             "(default: a run's search.confirm_repeats for a run's file, as "
                             "the run's own figure was taken, else 1)")


def resolve_task(name: str) -> Path:
    """The task folder for a built-in name or a path (a folder or its task.py)."""
    builtin = BUILTIN_TASKS / name
    if (builtin / "task.py").is_file():
        return builtin
    path = Path(name).expanduser()
    if (path / "task.py").is_file() or (path.name == "task.py" and path.is_file()):
        return path.resolve()
    names = ", ".join(sorted(p.name for p in BUILTIN_TASKS.iterdir() if (p / "task.py").is_file()))
    raise EvalUsageError(f"TASK {name!r} is neither a built-in task ({names}) nor a folder "
                         f"holding a task.py")


def infer_language(candidate: Path, given: str | None) -> str:
    """``given``, else the language the file's extension stands for."""
    if given:
        return given
    try:
        return spec_for_suffix(candidate.suffix).name
    except UnknownLanguage as exc:
        raise EvalUsageError(f"cannot tell the language of {candidate.name!r} from its "
                             f"extension ({exc}): pass --language") from None


def default_device(language: str) -> str:
    if language_spec(language).runs_on("cuda") and shutil.which("nvidia-smi"):
        return "cuda"
    return "cpu"


def _settings(language: str, device: str, run: RunFolder | None) -> EvaluatorSettings:
    """The run's evaluator settings (its timing included) for a file of a run, else the
    defaults; ``device`` as asked."""
    if run is not None:
        return replace(run.settings, device=device)
    # A torch extension compiles for about a minute: its spec gives the limit its builds need.
    return EvaluatorSettings(device=device,
                             compile_timeout_s=language_spec(language).compile_timeout_s)


def file_candidate(start: Candidate, text: str, origin: Origin) -> Candidate:
    """The candidate a kernel file stands for: with its knob header (every file a run writes),
    exactly the judged candidate (its source and knob values, hence its id); without one, the
    file with the starting kernel's knob values."""
    knobs, source = read_kernel_file(text, start.language, start.entry)
    if knobs is None:
        return start.derive(source=source, origin=origin)
    space = {k: tuple(dict.fromkeys((v, *start.space.get(k, ())))) for k, v in knobs.items()}
    return Candidate.create(language=start.language, source=source, entry=start.entry,
                            knobs=knobs, knob_space=space, parents=(start.id,), origin=origin,
                            spec=start.spec_dict)


def search_checks(task: Task, language: str) -> tuple[dict[str, Any], ...]:
    """The extra checks a search with the built-in tester adds (sizes 1 and odd, large
    magnitudes), so that a file judged here fails where it would fail in a search."""
    return tuple({"shape": dict(c.shape), "scale": c.scale, "reason": c.reason}
                 for c in RuleTester().checks(task, language))


def repeats_for(requested: int | None, run: RunFolder | None) -> int:
    """How many times eval judges the file: as asked, else as the run confirmed its best."""
    if requested is not None:
        if requested < 1:
            raise EvalUsageError(f"--repeats must be at least 1, not {requested}")
        return requested
    return max(1, run.config.search.confirm_repeats) if run is not None else 1


def roofline_bounds(task: Task, evaluation: Evaluation, flushed: bool) -> dict[str, str]:
    """Per shape, the limit its roofline fraction is taken against ("memory", "compute", or
    "cache": none, see evaluators/judge/figures.py); empty without the machine's figures."""
    from kernelswarm.evaluators.judge.figures import roofline_bound

    machine = evaluation.machine
    if machine is None:
        return {}
    return {shape.label: roofline_bound(*task.roofline(shape), machine, flushed)
            for shape in task.tuning_shapes}


def _evaluate(task_path: Path, candidate_file: Path, language: str, device: str,
              run: RunFolder | None = None, repeats: int = 1
              ) -> tuple[list[Evaluation], Task, EvaluatorSettings]:
    try:
        task = load_task(task_path, device.split(":")[0])
        if language not in task.kernels:
            raise EvalUsageError(f"task {task.name!r} has no starting kernel in {language!r} to "
                                 f"compare with; it has: {', '.join(sorted(task.kernels))}")
        settings = _settings(language, device, run)
        if run is None and not settings.extra_checks:
            settings = replace(settings, extra_checks=search_checks(task, language))
        evaluator = SandboxEvaluator(task_path, language, settings)
    except ValueError as exc:  # TaskError included: an unusable task, language or device
        raise EvalUsageError(str(exc)) from None
    origin = Origin(role="user", move="eval", rationale=str(candidate_file))
    text = candidate_file.read_text()
    with evaluator:
        candidate = file_candidate(evaluator.start_candidate, text, origin)
        evaluations = []
        for _ in range(repeats):  # each in a fresh sandbox
            evaluation = evaluator.evaluate(candidate)
            evaluations.append(naming_the_file(evaluation, candidate_file, text, candidate.source))
            if not evaluations[-1].ok:
                break
        return evaluations, task, settings


def _arguments(args: argparse.Namespace) -> tuple[Path, Path, RunFolder | None]:
    """(task folder, kernel file, the run folder it belongs to) from the command line."""
    files = list(args.files)
    if len(files) > 2 or (args.run is not None and files) or (args.run is None and not files):
        raise EvalUsageError("give TASK CANDIDATE_FILE, a file of a run folder "
                             "(RUN_DIR/best/<id>.<ext>), or --run RUN_DIR")
    try:
        if args.run is not None:
            run = open_run_folder(args.run)
            candidate = run.best_file()
        else:
            candidate = Path(files[-1]).expanduser()
            if not candidate.is_file():
                raise EvalUsageError(f"CANDIDATE_FILE {str(candidate)!r} is not a file")
            folder = run_folder_of(candidate)
            run = open_run_folder(folder) if folder is not None else None
        if len(files) == 2:
            return resolve_task(files[0]), candidate, run
        if run is None:
            raise EvalUsageError(f"{str(candidate)!r} is not in a run folder: give TASK too")
        return run.task_path, candidate, run
    except ConfigError as exc:
        raise EvalUsageError(str(exc)) from None


def run_eval_command(args: argparse.Namespace, console: Console) -> int:
    """Evaluate the file and print the verdict; the exit status (0, 1 or 2)."""
    try:
        task_path, candidate, run = _arguments(args)
        language = args.language or (run.language_of(candidate.stem) if run else None)
        language = infer_language(candidate, language)
        device = args.device or (run.settings.device if run else default_device(language))
        repeats = repeats_for(args.repeats, run)
        evaluations, task, settings = _evaluate(task_path, candidate, language, device, run,
                                                repeats)
    except (EvalUsageError, TaskError) as exc:
        Console(stderr=True).print(f"[red]error:[/] {escape(str(exc))}", highlight=False)
        return 2
    timing = TimingSettings.of(settings)
    recorded = run.recorded(candidate.stem) if run is not None else None
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        # piped or captured with no width asked for: no terminal to fit, keep every column
        console = Console(file=console.file, width=max(console.width, 160))
    evaluation = median_evaluation(evaluations)
    speedups = [e.speedup for e in evaluations]
    bounds = roofline_bounds(task, evaluation, settings.flush_cache)
    if args.json:
        doc = evaluation_document(evaluation, task.name, language, candidate)
        for shape in doc["shapes"]:
            shape["roofline_bound"] = bounds.get(shape["shape"])
        doc["timing"] = {**timing.as_dict(), "regime": timing.regime}
        doc["repeats"] = {"asked": repeats, "speedup_vs_start": speedups,
                          "speedup_vs_best": [e.speedup_vs_best for e in evaluations]}
        if run is not None:
            doc["run"] = _finite({"folder": str(run.path), "recorded": recorded})
        print(json.dumps(doc, indent=2, allow_nan=False))
    else:
        if evaluation.shapes:  # a kernel that did not build has no row to show
            console.print(evaluation_table(evaluation, task.name, language, timing.regime,
                                           bounds, console.width))
        console.print(verdict_text(evaluation), highlight=False)
        if len(evaluations) > 1 and evaluation.ok:
            console.print(f"judged {len(evaluations)} times, each in a fresh sandbox: the "
                          f"median is shown ({min(speedups):.3f}x to {max(speedups):.3f}x vs "
                          f"the starting kernel)", highlight=False)
        if recorded is not None and evaluation.ok:
            change = evaluation.speedup / recorded["speedup_vs_start"] - 1
            text = (f"the run recorded {recorded['speedup_vs_start']:.3f}x vs the starting "
                    f"kernel for this kernel ({recorded['source']}); this evaluation: "
                    f"{evaluation.speedup:.3f}x ({change:+.1%})")
            then, now = recorded["speedup_vs_best"], evaluation.speedup_vs_best
            if then > 0 and now > 0:
                text += (f"; vs the best baseline {then:.3f}x then, {now:.3f}x now "
                         f"({now / then - 1:+.1%})")
            console.print(text, highlight=False)
    return 0 if evaluation.ok else 1


def _finite(value: Any) -> Any:
    """``value`` with non-finite floats as None, recursively (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def evaluation_document(evaluation: Evaluation, task: str, language: str,
                        candidate: Path) -> dict[str, Any]:
    """The evaluation as a JSON-able dict (NaN as null)."""
    doc = asdict(evaluation)
    doc["status"] = evaluation.status.value
    doc.update(task=task, language=language, file=str(candidate),
               speedup_vs_start=evaluation.speedup, speedup_vs_eager=evaluation.speedup_vs_eager,
               speedup_vs_best=evaluation.speedup_vs_best,
               speedup_vs_best_ci=evaluation.geomean_ci("speedup_vs_best"),
               speedup_vs_compile=evaluation.speedup_vs_compile)
    return _finite(doc)


def _number(value: float, fmt: str, suffix: str = "") -> str:
    return f"{value:{fmt}}{suffix}" if math.isfinite(value) else "—"


EVAL_COLUMNS = ("shape", "ok", "max err", "µs", "IQR µs", "× start", "best baseline", "× best",
                "× eager", "roofline")


def evaluation_table(evaluation: Evaluation, task: str, language: str,
                     regime: str = "", bounds: dict[str, str] | None = None,
                     width: int | None = None) -> Table:
    """One row per shape: correctness, largest error, median time and its interquartile range
    (µs), speedups vs the starting kernel, the best baseline (named; ``≈`` inside the noise) and
    PyTorch eager, percent of the roofline (``bounds``: "in cache" where no roofline bounds
    the shape); ``regime`` (the cache regime) in the title. ``width``: columns are left out
    (the spread, the error, eager, the roofline) until the table fits it."""
    bounds = bounds or {}
    labels, common = compact_labels([s.shape for s in evaluation.shapes])
    title = " · ".join(p for p in (task, language, evaluation.device, common, regime) if p)
    rows = [dict(zip(EVAL_COLUMNS, (
        escape(labels[s.shape].replace(",", ", ")), "yes" if s.correct else "[red]no[/]",
        _number(s.max_abs_err, ".1e"), _number(s.time_us, ".1f"),
        _number(s.time_spread_us, ".1f"), _number(s.speedup_vs_start, ".2f", "x"),
        s.best_baseline or "—",
        speedup_text(s.speedup_vs_best, s.speedup_vs_best_ci, mark_noise=True),
        _number(s.speedup_vs_eager, ".2f", "x"),
        "in cache" if bounds.get(s.shape) == "cache"
        else _number(s.roofline_fraction * 100, ".1f", "%")), strict=True))
        for s in evaluation.shapes]

    def build(columns: tuple[str, ...]) -> Table:
        table = Table(title=escape(title), box=box.SIMPLE_HEAD, padding=(0, 0, 0, 1),
                      show_edge=False)
        for column in columns:
            table.add_column(column, justify="left" if column == "shape" else "right",
                             no_wrap=True)
        for row in rows:
            table.add_row(*(row[c] for c in columns))
        if "cache" in bounds.values() and "roofline" in columns:
            table.caption = ("in cache: with a warm cache the shape's data fits in the "
                             "last-level cache, faster than the memory roofline allows, so "
                             "none applies")
        return table

    return fit(build, EVAL_COLUMNS, ("IQR µs", "max err", "× eager", "roofline", "ok"), width)


def verdict_text(evaluation: Evaluation) -> str:
    colour = "green" if evaluation.ok else "red"
    text = f"[bold {colour}]{evaluation.status.value}[/] {escape(evaluation.message)}"
    if evaluation.status is Status.OK:
        best = speedup_text(evaluation.speedup_vs_best, evaluation.geomean_ci("speedup_vs_best"),
                            mark_noise=True)
        text += (f"\nspeedup (geometric mean): {evaluation.speedup:.3f}x vs the starting kernel, "
                 f"{best} vs ")
        if baseline_names(evaluation) == {"eager"}:
            text += "PyTorch eager (the only baseline measured)"
        else:
            text += (f"the best baseline of each shape, {evaluation.speedup_vs_eager:.3f}x vs "
                     f"PyTorch eager")
    return text
