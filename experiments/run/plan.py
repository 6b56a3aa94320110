"""What a run would do, checked without starting it (``kernelswarm run --dry-run``).

The configuration is loaded and validated by the caller; here the task is loaded, the searched
languages are checked against it and the device, and each starting kernel is built through the
evaluator's compile cache, as the run's first step would. No Ray, no run folder, no MLflow run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernelswarm.search import CompileResult, StartingKernelFailed, Task, load_task

from ..config import Config


@dataclass(frozen=True)
class StartBuild:
    """A starting kernel that built: its language, the task folder's file holding its source
    (None where no file there does) and the build."""

    language: str
    file: Path | None
    result: CompileResult


@dataclass(frozen=True)
class RunPlan:
    """A configuration that loaded, its task, and its starting kernels, built."""

    config: Config
    task: Task
    builds: tuple[StartBuild, ...]


def start_file(task: Task, source: str) -> Path | None:
    """The file of the task's folder whose content is ``source`` (a starting kernel's)."""
    for path in sorted(task.path.iterdir()):
        if path.is_file() and path.suffix != ".pyc" and path.read_bytes() == source.encode():
            return path
    return None


def plan_run(config: Config) -> RunPlan:
    """``config``'s task loaded and its starting kernels built. Raises what the run would raise
    before searching: ``TaskError`` or ``ConfigError`` for the task and the languages,
    ``StartingKernelFailed`` for a starting kernel that does not build (the compiler's message
    naming the task's file)."""
    # The run's own checks and settings, not copies of them: a dry run refuses what a run does.
    from kernelswarm.evaluators import SandboxEvaluator

    from .compiler_messages import naming_the_users_file
    from .prepare import check_languages, evaluator_settings

    task = load_task(config.task_path(), config.evaluator.device)
    check_languages(config, task)
    settings = evaluator_settings(config)
    builds = []
    for language in config.languages:
        start = task.starting_candidate(language)
        result = SandboxEvaluator(task.path, language, settings).compile(start)
        if not result.ok:
            raise StartingKernelFailed(naming_the_users_file(result.as_evaluation(), task, start))
        builds.append(StartBuild(language, start_file(task, start.source), result))
    return RunPlan(config, task, tuple(builds))
