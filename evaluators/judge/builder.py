"""``SandboxBuilder``: what ``SandboxEvaluator.compile`` does, for a compile pool.

A lineage builds its own candidates before it asks for an evaluation worker (cluster/
lineage_actor.py). Building needs the language, the screen and the compile cache; it does
not need the task's module, which imports torch (2-3 s of CPU per process). The builder loads
the task only where the language builds device code ahead (Triton on a GPU: the kernels are
compiled for every shape the judge will call them on, evaluators/judge/prebuild.py), so that
four lineages of a C++ or CUDA search start without torch.

``SandboxEvaluator`` builds through one of these, holding the task it has loaded already: a
candidate is built the same way wherever it is built, and the same cache serves both.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ...search import Candidate, CompileResult
from ..languages import KernelLanguage, get_language
from ..languages.compile_cache import Build, CompileCache
from ..languages.screen import screen
from ..settings import EvaluatorSettings


class SandboxBuilder:
    """Builds candidates of one task and language into ``settings.cache_dir``'s compile
    cache. Picklable (as its arguments), so a factory of it travels to a lineage's actor."""

    def __init__(self, task_path: Path | str, language: str | KernelLanguage,
                 settings: EvaluatorSettings | None = None, task: Any = None) -> None:
        self.task_path = Path(task_path)
        self.settings = settings or EvaluatorSettings()
        self.language = (language if not isinstance(language, str)
                         else get_language(language, self.settings))
        self.cache = CompileCache(self.settings.cache_dir)
        self._task = task  # loaded on first need where not given
        self._prebuilder: Any = None
        self._deadline: float | None = None  # Unix time a build ahead is stopped at
        self.builds_ahead = self.settings.builds_ahead(self.language.name)

    def __getstate__(self) -> dict[str, Any]:
        return {"task_path": self.task_path, "language": self.language.name,
                "settings": self.settings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["task_path"], state["language"], state["settings"])

    def until(self, deadline: float | None) -> None:
        """Stop a build ahead still running at ``deadline`` (Unix time: a search's end);
        the candidate's own build is kept, its device code left to its first calls."""
        self._deadline = deadline

    def compile(self, candidate: Candidate) -> CompileResult:
        """Build ``candidate`` into the cache, and its device code ahead of its first call
        where its language compiles there; a source the screen refuses is not built
        (``rejected=True``, the screen's finding as the log)."""
        return self.build(candidate, ahead=True).result

    def build(self, candidate: Candidate, ahead: bool = False) -> Build:
        """The candidate's build from the cache (made now where missing); with ``ahead``, its
        device code too (else only found where a compile pool built it)."""
        if candidate.language != self.language.name:
            raise ValueError(f"candidate {candidate.id} is in {candidate.language!r}; this "
                             f"evaluator judges {self.language.name!r}")
        finding = screen(candidate.source, self.language.screen_rules)
        if finding is not None:
            return Build(CompileResult(candidate.id, ok=False, seconds=0.0,
                                       log=finding.message, rejected=True), None)
        build = self.cache.build(self.language, candidate, self.settings.compile_timeout_s)
        if build.artifact is None or not self.builds_ahead:
            return build
        prebuilt = self._prebuild().prebuild(candidate, build.artifact, build=ahead,
                                             deadline=self._deadline if ahead else None)
        return replace(build, prebuilt=prebuilt.folder, result=replace(
            build.result, seconds=build.result.seconds + prebuilt.seconds))

    def _prebuild(self) -> Any:
        if self._prebuilder is None:
            # imported here: the Prebuilder and the task's module bring torch
            from ...search import load_task
            from .prebuild import Prebuilder
            if self._task is None:
                self._task = load_task(self.task_path, self.settings.device.split(":")[0])
            self._prebuilder = Prebuilder(self._task, self.language, self.settings,
                                          self.cache.root)
        return self._prebuilder

    def close(self) -> None:
        """Nothing to release: builds are subprocesses that end with each build."""
