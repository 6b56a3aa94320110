"""A kernel file judged as a search judges a candidate: the evaluator's settings (a run's, for a
file of that run), the built-in tester's extra checks, the repeats, and the roofline each shape
is stated against."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from kernelswarm.agents import RuleTester
from kernelswarm.evaluators import TIMING_FILE, EvaluatorSettings, SandboxEvaluator, TimingSettings
from kernelswarm.search import Evaluation, Origin, Task, language_spec, load_task

from ..run.compiler_messages import naming_the_file
from ..run.folder import RunFolder
from ..views.carried_baselines import MeasuredBaselines, read_measured
from .kernel_file import EvalUsageError, file_candidate


def settings_for(language: str, device: str, run: RunFolder | None) -> EvaluatorSettings:
    """The run's evaluator settings (its timing included) for a file of a run, else those
    ``kernelswarm run --task TASK`` judges with (the quickstart's: a file judged here and the
    same kernel in a run read alike); ``device`` as asked."""
    if run is not None:
        return replace(run.settings, device=device)
    from ..config import load_config
    from ..run.prepare import evaluator_settings  # imports Ray: only once a file is judged

    settings = evaluator_settings(load_config(None, []))
    # A torch extension compiles for about a minute: its spec gives the limit its builds need.
    settings = replace(settings, device=device, compile_timeout_s=max(
        settings.compile_timeout_s, language_spec(language).compile_timeout_s))
    if device.startswith("cuda"):
        # On a GPU the baselines are timed with the L2 flushed whatever the settings say
        # (evaluators/baselines/baseline_worker.py): a candidate timed warm would be compared unfairly.
        # Its kernel launches are listed too, as eval always did there (figures unchanged).
        settings = replace(settings, flush_cache=True, memory_limit_mb=None,
                           profile_kernels=True)
    return settings


def settings_origin(settings: EvaluatorSettings, run: RunFolder | None) -> str:
    """Where the timing settings came from, and the regime they give, as eval states it."""
    regime = TimingSettings.of(settings).regime
    if run is not None:
        return f"timed with the run's own settings ({run.path / TIMING_FILE}): {regime}"
    text = f"timed as `kernelswarm run` times by default (quickstart.toml): {regime}"
    if settings.device.startswith("cuda"):
        text += (" (on a GPU the baselines are timed with the L2 flushed, so the kernel is "
                 "too; the quickstart's warm cache is for its CPU shapes)")
    return text


def search_checks(task: Task, language: str) -> tuple[dict[str, Any], ...]:
    """The extra checks a search with the built-in tester adds (sizes 1 and odd, large
    magnitudes), so that a file judged here fails where it would fail in a search."""
    return tuple({"shape": dict(c.shape), "scale": c.scale, "reason": c.reason}
                 for c in RuleTester().checks(task, language))


def measured_for(evaluation: Evaluation, task: Task, settings: EvaluatorSettings,
                 language: str) -> MeasuredBaselines | None:
    """The cached measurement ``evaluation``'s baseline times were carried over from (views/
    carried_baselines.py), with the starting kernel of ``language`` (the kernel judged);
    None where it had no baselines or the entry is gone."""
    key = evaluation.baselines.key if evaluation.baselines is not None else ""
    return read_measured(settings.cache_dir, task.name, key, language)


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
    from kernelswarm.evaluators import roofline_bound

    machine = evaluation.machine
    if machine is None:
        return {}
    return {shape.label: roofline_bound(*task.roofline(shape), machine, flushed)
            for shape in task.tuning_shapes}


def judge_file(task_path: Path, candidate_file: Path, language: str, device: str,
               run: RunFolder | None = None, repeats: int = 1
               ) -> tuple[list[Evaluation], Task, EvaluatorSettings]:
    """The file judged ``repeats`` times, each in a fresh sandbox, stopping at the first verdict
    that is not OK; with the task and the settings it was judged with."""
    try:
        task = load_task(task_path, device.split(":")[0])
        if language not in task.kernels:
            raise EvalUsageError(f"task {task.name!r} has no starting kernel in {language!r} to "
                                 f"compare with; it has: {', '.join(sorted(task.kernels))}")
        settings = settings_for(language, device, run)
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

