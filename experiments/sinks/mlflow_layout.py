"""How a run reads in MLflow's UI: run names, filterable tags, artifact names the UI previews,
and profile figures that never change kept out of the metric list (they become params).
"""

from __future__ import annotations

import math
import posixpath
from collections.abc import Mapping
from typing import Any

from kernelswarm.search import Evaluation, RunInfo

# File endings MLflow's artifact view shows as text (its UI's list, MLflow 2.x and 3.x); any
# other source file (.cpp, .cu) would be offered only as a download.
PREVIEWED = {"txt", "log", "cfg", "conf", "ini", "toml", "yaml", "yml", "xml", "json", "js",
             "py", "py3", "rst", "md", "html"}
# Metric prefixes whose values are often the same on every evaluation (machine figures, timing
# settings, isolation levels): logged as metrics only once a value changes.
STEADY_PREFIXES = ("profile.", "resource.")
# Per-candidate figures that only some agents move: the built-in agent spends no tokens, so a
# chart of zeros would be one of many the UI shows for nothing.
STEADY_KEYS = frozenset({"tokens", "cost_usd"})


def previewable(path: str) -> str:
    """``path`` with ``.txt`` appended when MLflow would not preview its ending
    (``best/ab12.cpp`` -> ``best/ab12.cpp.txt``); a ``.py`` or ``.json`` stays as it is."""
    ending = posixpath.splitext(path)[1].lstrip(".").lower()
    return path if ending in PREVIEWED else f"{path}.txt"


def run_tags(run: RunInfo) -> dict[str, str]:
    """Tags to filter runs by in the UI (``tags.task = 'silu_and_mul'``): task, language,
    agent, device, and the LLM model where there is one."""
    params = run.params
    tags = {"task": run.task, "language": run.language,
            "agent": str(params.get("agent.kind", "")),
            "device": str(params.get("evaluator.device", ""))}
    model = params.get("agent.llm.model")
    if params.get("agent.kind") == "llm" and model:
        tags["model"] = str(model)
    return {k: v for k, v in tags.items() if v}


def parent_run_name(run: RunInfo) -> str:
    """``silu_and_mul cpp · builtin · 4x10 · cpu`` (a knob study: ``silu_and_mul cpp · tune ·
    4 trials · cpu``): the task and the configuration that tells one run from another in the
    experiment's list."""
    params, tags = run.params, run_tags(run)
    agent = tags.get("model") or tags.get("agent", "")
    candidates = params.get("search.candidates_per_lineage")
    size = f"{run.lineages}x{candidates}" if candidates else f"{run.lineages} lineages"
    if "tune.trials" in params:  # a knob study: no agent, no lineages, its trials
        agent, size = "tune", f"{params['tune.trials']} trials"
    return " · ".join(p for p in (f"{run.task} {run.language}", agent, size,
                                  tags.get("device", "")) if p)


def shape_table(evaluation: Evaluation) -> dict[str, list[Any]]:
    """The per-shape results as columns for ``MlflowClient.log_table`` (NaN as None)."""
    columns: dict[str, list[Any]] = {}
    for shape in evaluation.shapes:
        for key in ("shape", "correct", "time_us", "time_spread_us", "start_time_us",
                    "eager_time_us", "compile_time_us", "best_baseline", "best_baseline_us",
                    "speedup_vs_start", "speedup_vs_best", "speedup_vs_best_ci",
                    "roofline_fraction"):
            value = getattr(shape, key)
            if isinstance(value, float) and not math.isfinite(value):
                value = None
            columns.setdefault(key, []).append(value)
    return columns


class SteadyMetrics:
    """Holds back a lineage's ``profile.*``/``resource.*`` metrics (and its ``tokens`` and
    ``cost_usd``) until their value changes.

    ``observe`` returns the (key, value, millis, step) points to log now: a key seen with one
    value so far is held; when it changes, its held first point and the new one are released,
    and from then on every point is. ``constants()`` gives the keys that never changed, which
    the sink logs as params at the end.
    """

    def __init__(self) -> None:
        self._held: dict[str, tuple[float, int, int]] = {}
        self._moving: set[str] = set()

    def observe(self, values: Mapping[str, float], millis: int,
                step: int) -> list[tuple[str, float, int, int]]:
        out = []
        for key, value in values.items():
            if not (key.startswith(STEADY_PREFIXES) or key in STEADY_KEYS) or key in self._moving:
                out.append((key, value, millis, step))
            elif key not in self._held:
                self._held[key] = (value, millis, step)
            elif self._held[key][0] != value:
                first, first_millis, first_step = self._held.pop(key)
                self._moving.add(key)
                out += [(key, first, first_millis, first_step), (key, value, millis, step)]
        return out

    def constants(self) -> dict[str, float]:
        return {key: value for key, (value, _, _) in self._held.items()}
