"""A kernel file as a candidate of a task, judged outside a search (``kernelswarm eval``, ``tune``
and ``tasks export-flashinfer``): which task and language it is for, where it runs, and the
candidate it stands for, knob header included."""

from __future__ import annotations

import shutil
from pathlib import Path

from kernelswarm.search import (
    Candidate,
    Origin,
    UnknownLanguage,
    language_spec,
    spec_for_suffix,
)

from ..config import BUILTIN_TASKS
from ..sinks.sources import read_kernel_file


class EvalUsageError(Exception):
    """A task, kernel file, language or device that cannot be judged (arguments of ``kernelswarm
    eval`` or ``tune``); the message names which."""


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

