"""``search.compile_start``: the kernels a run's lineages judge first, from ``torch.compile``.

For each of the run's languages that Inductor writes code in on the evaluator's device
(``Config.compile_start_languages``: triton on a GPU, cpp on the CPU), Inductor's kernel for the
task's reference is generated on every shape the evaluator runs (evaluators/starts/generated_starts.py,
once per machine) and becomes the first candidate of that language's lineages. The language's
starting kernel stays the task's own: speedups are still over it, and the generated kernel is
judged, recorded and kept or left like any candidate.

Where no kernel can be generated, the run goes on from the task's kernels and says why, on the
console and in the run folder's ``compile_start.json``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from kernelswarm.evaluators import EvaluatorSettings
from kernelswarm.search import Candidate, Origin, Task

from ..config import Config

COMPILE_START_FILE = "compile_start.json"
MOVE = "compile_start"  # the plan move the generated kernel is judged under


def first_candidates(config: Config, task: Task, settings: EvaluatorSettings, console: Console,
                     run_dir: Path) -> dict[str, tuple[Candidate, ...]]:
    """Per language, the generated kernel its lineages judge first (none where it could not be
    generated); what happened is written to ``run_dir / COMPILE_START_FILE``."""
    from kernelswarm.evaluators import GenerationError, compile_start

    found: dict[str, tuple[Candidate, ...]] = {}
    report: dict[str, Any] = {}
    for language in config.compile_start_languages():
        console.print(f"search.compile_start: generating the {language} kernel of "
                      f"torch.compile for {task.name} on each shape", highlight=False)
        began = time.monotonic()
        phases: dict[str, float] = {}
        try:
            generated, cached = compile_start(task, language, settings, phases=phases)
        except GenerationError as exc:
            reason = str(exc)
            report[language] = {"used": False, "reason": reason}
            console.print(f"  [yellow]no {language} kernel from torch.compile:[/] "
                          f"{escape(reason.splitlines()[0] if reason else '')}; its lineages "
                          f"start from the task's kernel", highlight=False)
            continue
        seconds = time.monotonic() - began
        own = task.starting_candidate(language)
        candidate = Candidate.create(
            language=language, source=generated.source, entry=generated.entry,
            knob_space=generated.knobs, spec=own.spec_dict,
            origin=Origin(role="seed", move=MOVE, rationale=(
                f"torch.compile's kernel for the reference, a version per shape "
                f"({len(generated.shapes)} shapes), launched as Inductor chose on each; "
                f"judged first, the lineage goes on from it where it is faster than the "
                f"task's starting kernel.")))
        found[language] = (candidate,)
        report[language] = {"used": True, "candidate": candidate.id, "cached": cached,
                            "seconds": round(seconds, 2), **phases,
                            "shapes": list(generated.shapes),
                            "skipped": list(generated.skipped),
                            "knobs": {k: list(v) for k, v in generated.knobs.items()}}
        console.print(f"  {language}: {len(generated.shapes)} shapes, "
                      f"{len(generated.knobs)} knobs, candidate {candidate.id} "
                      f"({_took(seconds, cached, phases)})", highlight=False)
    if report:
        (run_dir / COMPILE_START_FILE).write_text(json.dumps(report, indent=1))
    return found


def _took(seconds: float, cached: bool, phases: Mapping[str, float]) -> str:
    """What making the start took: "from the cache", or its seconds, the baselines' apart."""
    baselines = phases.get("baselines_s", 0.0)
    if cached:
        return "from the cache" + (f", after {baselines:.0f} s measuring the baselines"
                                   if baselines >= 1 else "")
    return (f"{seconds:.0f} s: the baselines {baselines:.0f} s, generating "
            f"{phases.get('generation_s', seconds):.0f} s")


def read_report(run_dir: Path) -> Mapping[str, Any]:
    """A run's ``compile_start.json`` ({} when it has none)."""
    try:
        return dict(json.loads((run_dir / COMPILE_START_FILE).read_text()))
    except (OSError, ValueError):
        return {}
