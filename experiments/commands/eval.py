"""``kernelswarm eval TASK CANDIDATE_FILE``: judge one kernel file against a task, once.

The file is evaluated exactly as a search would evaluate a candidate (screen, build, sandbox,
correctness on every tuning and held-out shape, timing interleaved with the task's starting
kernel, speedups over the baselines of evaluators/baselines/baselines.py) and the verdict is printed as a
table, or as JSON with ``--json``. A file with a knob header (every file a run writes) is built
with those knob values. A file from a run folder (``RUN_DIR/best/<id>.<ext>`` or
``RUN_DIR/candidates/<id>.<ext>``), or ``--run RUN_DIR`` (its best kernel), is judged with that
run's task, language, device and timing settings (``timing.json``), and the run's own figure is
shown next to the new one. Exit status: 0 when the kernel is OK, 1 for any other verdict (and
for a task whose own starting kernel fails: its verdict is printed), 2 for arguments that
cannot be used (an unknown task, a missing file, a language the task has no starting kernel
for), each named in the message.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from kernelswarm.evaluators import TimingSettings
from kernelswarm.search import (
    LANGUAGES,
    SUFFIX_LANGUAGES,
    Evaluation,
    StartingKernelFailed,
    TaskError,
    load_task,
    median_evaluation,
)

from ..config import ConfigError
from ..evaluation.kernel_file import (
    EvalUsageError,
    default_device,
    infer_language,
    resolve_task,
)
from ..run.compiler_messages import naming_the_users_file
from ..run.folder import RunFolder, open_run_folder, run_folder_of
from ..views.carried_baselines import baseline_scales, carried_line
from ..views.evaluation_view import evaluation_document, evaluation_table, verdict_text
from ..views.speedups import finite


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


def _print_failed_start(evaluation: Evaluation, task_path: Path, language: str,
                        device: str) -> None:
    """The task's starting kernel's verdict, its source file named as the user wrote it."""
    task = load_task(task_path, device.split(":")[0])
    evaluation = naming_the_users_file(evaluation, task, task.starting_candidate(language))
    Console(stderr=True).print(
        f"[red]error:[/] the task's starting {language} kernel fails "
        f"({evaluation.status.value}), so no kernel can be judged against it: "
        f"{escape(evaluation.message)}", highlight=False)


def run_eval_command(args: argparse.Namespace, console: Console) -> int:
    """Evaluate the file and print the verdict; the exit status (0, 1 or 2)."""
    try:
        task_path, candidate, run = _arguments(args)
        language = args.language or (run.language_of(candidate.stem) if run else None)
        language = infer_language(candidate, language)
        device = args.device or (run.settings.device if run else default_device(language))
        # judging imports torch: only once the arguments are known to be usable
        from ..evaluation.judge_file import judge_file, repeats_for

        repeats = repeats_for(args.repeats, run)
        evaluations, task, settings = judge_file(task_path, candidate, language, device, run,
                                                  repeats)
    except (EvalUsageError, TaskError) as exc:
        Console(stderr=True).print(f"[red]error:[/] {escape(str(exc))}", highlight=False)
        return 2
    except StartingKernelFailed as failed:  # every speedup is over it: nothing to judge
        _print_failed_start(failed.evaluation, task_path, language, device)
        return 1
    from ..evaluation.judge_file import measured_for, roofline_bounds, settings_origin

    timing = TimingSettings.of(settings)
    recorded = run.recorded(candidate.stem) if run is not None else None
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        # piped or captured with no width asked for: no terminal to fit, keep every column
        console = Console(file=console.file, width=max(console.width, 160))
    evaluation = median_evaluation(evaluations)
    speedups = [e.speedup for e in evaluations]
    bounds = roofline_bounds(task, evaluation, settings.flush_cache)
    measured = measured_for(evaluation, task, settings, language)  # carried from what
    if args.json:
        doc = evaluation_document(evaluation, task.name, language, candidate)
        scales = baseline_scales(evaluation, measured) if measured is not None else {}
        for shape in doc["shapes"]:
            shape["roofline_bound"] = bounds.get(shape["shape"])
            shape["baseline_scale"] = scales.get(shape["shape"])
        doc["timing"] = {**timing.as_dict(), "regime": timing.regime}
        doc["timing_source"] = settings_origin(settings, run)
        doc["repeats"] = {"asked": repeats, "speedup_vs_start": speedups,
                          "speedup_vs_best": [e.speedup_vs_best for e in evaluations]}
        if run is not None:
            doc["run"] = finite({"folder": str(run.path), "recorded": recorded})
        print(json.dumps(doc, indent=2, allow_nan=False))
    else:
        if evaluation.shapes:  # a kernel that did not build has no row to show
            console.print(evaluation_table(evaluation, task.name, language, timing.regime,
                                           bounds, console.width))
        console.print(verdict_text(evaluation), highlight=False)
        # which regime and settings, and by how much the baselines' times were carried over
        for note in (settings_origin(settings, run), carried_line(evaluation, measured)):
            if note:
                console.print(note, style="dim", highlight=False, markup=False)
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

