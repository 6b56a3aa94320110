"""The GPU check against the last one committed: which figures of judging got slower.

A change can make judging a candidate slower on a GPU without any CPU test noticing (one did:
``eval_cost`` of silu_and_mul went from 0.98 s to 3-4 s, the timing phase's warm-up from 0.15 s
to 2-3 s, and nothing said so for two days). So every GPU check compares what it measured with
the newest ``docs/measurements/gpu-check-YYYYMMDD*.json`` of the checkout and names every figure
more than ``SLOWER`` times the committed one: the median evaluation of each task and language,
and each phase, request to the runner and runner step within it (figures under ``FLOOR_S`` are
left out: their noise is larger than any change worth a look).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SLOWER = 1.2
FLOOR_S = 0.05
_NAME = re.compile(r"gpu-check-(\d{8})[^/]*\.json\Z")


@dataclass(frozen=True)
class Regression:
    """One figure that got slower than the committed check's."""

    task: str
    language: str
    figure: str  # "eval" for the whole evaluation, else a phase, request or runner step
    before_s: float
    now_s: float

    @property
    def ratio(self) -> float:
        return self.now_s / self.before_s

    def describe(self) -> str:
        return (f"{self.task} ({self.language}) {self.figure}: {self.before_s:.3f} s -> "
                f"{self.now_s:.3f} s ({self.ratio:.2f}x)")

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": round(self.ratio, 3)}


def latest_check(folder: Path, exclude: Path | None = None) -> Path | None:
    """The newest ``gpu-check-YYYYMMDD*.json`` in ``folder`` (by its date, then its name)."""
    found = [p for p in folder.glob("gpu-check-*.json") if _NAME.search(p.name)
             and (exclude is None or p.resolve() != exclude.resolve())]
    return max(found, key=lambda p: (_NAME.search(p.name).group(1), p.name), default=None)


def figures(check: Mapping[str, Any]) -> dict[tuple[str, str, str], float]:
    """(task, language, figure) -> seconds, from a check's summary of any version: the
    ``cuda`` evaluations in ``eval_cost_median_s``/``eval_cost_phases_s``, the other languages
    in ``eval_cost_by_language``."""
    found: dict[tuple[str, str, str], float] = {}

    def add(task: str, language: str, median: Any, phases: Any) -> None:
        if _seconds(median) is not None:
            found[(task, language, "eval")] = float(median)
        for name, value in (phases or {}).items():
            if _seconds(value) is not None:
                found[(task, language, str(name))] = float(value)

    for task, median in (check.get("eval_cost_median_s") or {}).items():
        add(task, "cuda", median, (check.get("eval_cost_phases_s") or {}).get(task))
    for language, tasks in (check.get("eval_cost_by_language") or {}).items():
        for task, entry in (tasks or {}).items():
            if isinstance(entry, Mapping):
                add(task, language, entry.get("median_s"), entry.get("phases_s"))
    return found


def regressions(before: Mapping[str, Any], now: Mapping[str, Any]) -> list[Regression]:
    """Every figure of ``now`` more than ``SLOWER`` times the same figure of ``before``."""
    earlier, current = figures(before), figures(now)
    found = [Regression(*key, earlier[key], value) for key, value in current.items()
             if key in earlier and max(value, earlier[key]) >= FLOOR_S
             and value > SLOWER * earlier[key]]
    return sorted(found, key=lambda r: (r.figure != "eval", -r.ratio))


def report(before_path: Path, now: Mapping[str, Any]) -> tuple[list[Regression], str]:
    """The regressions against the check at ``before_path`` and the lines that say them."""
    before = json.loads(before_path.read_text())
    found = regressions(before, now)
    where = f"{before_path.name} ({before.get('commit', 'commit not recorded')})"
    if not found:
        return found, f"no figure more than {SLOWER:.1f}x slower than in {where}"
    lines = [f"{len(found)} figure(s) more than {SLOWER:.1f}x slower than in {where}:"]
    lines += [f"  SLOWER {r.describe()}" for r in found]
    return found, "\n".join(lines)


def _seconds(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None
