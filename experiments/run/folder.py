"""A run folder read back: the settings its kernels were judged with and the figures it recorded.

``kernelswarm eval`` uses it to judge a file of a run as the run did: the run's task, language,
device and evaluator settings (``config.json``), its timing (``timing.json``, written by every
run), the tester's extra checks (``checks.json``), and the candidate's knob values (the file's knob header); then it prints the run's own
figure for that candidate next to the new one.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kernelswarm.evaluators import TIMING_FILE, EvaluatorSettings, TimingSettings

from ..config import Config, ConfigError, load_run_config
from ..sinks import read_evaluations

KERNEL_FOLDERS = ("best", "candidates")


@dataclass(frozen=True)
class RunFolder:
    """A run folder's configuration and the evaluator settings its kernels were judged with."""

    path: Path
    config: Config
    settings: EvaluatorSettings

    @property
    def task_path(self) -> Path:
        return self.config.task_path()

    @property
    def language(self) -> str:
        return self.config.task.language

    def language_of(self, candidate_id: str) -> str | None:
        """The language the run judged ``candidate_id`` in: the run's one language, or, in a
        run of several (``search.languages``), the one its records give; None if unrecorded
        (the file's suffix then decides)."""
        if len(self.config.languages) == 1:
            return self.config.task.language
        try:
            rows = read_evaluations(self.path).select(["candidate_id", "language"]).to_pylist()
        except FileNotFoundError:
            return None
        return next((r["language"] for r in rows if r["candidate_id"] == candidate_id), None)

    def best_file(self) -> Path:
        """The run's best kernel file (``best/<id>.<ext>``); ``ConfigError`` if it has none."""
        summary = self.path / "summary.json"
        if summary.is_file():
            best = json.loads(summary.read_text()).get("best") or {}
            if best.get("file") and Path(best["file"]).is_file():
                return Path(best["file"])
        files = sorted((self.path / "best").glob("*.*")) if (self.path / "best").is_dir() else []
        if len(files) != 1:
            raise ConfigError(f"{self.path}: no best kernel to evaluate (best/ holds "
                              f"{len(files)} files and summary.json names none)")
        return files[0]

    def recorded(self, candidate_id: str) -> dict[str, Any] | None:
        """The run's figures for ``candidate_id``: for the run's best kernel confirmed after the
        search, the figures the run reported (the median of its repeats, ``source`` says so);
        otherwise its first OK record's. Geometric means and per-shape speedups; None when the
        run did not record it as OK."""
        found = self._first_record(candidate_id)
        summary = self.path / "summary.json"
        best = (json.loads(summary.read_text()).get("best") or {}) if summary.is_file() else {}
        if best.get("candidate_id") != candidate_id or not best.get("confirmed"):
            return found and {**found, "source": f"record {found['seq']}"}
        return {"seq": found["seq"] if found else None,
                "source": f"the run's confirmed figure (median of {best['repeats']} repeats "
                          f"after the search, {best['speedup_vs_start_range'][0]:.3f}x to "
                          f"{best['speedup_vs_start_range'][1]:.3f}x)",
                "speedup_vs_start": best["speedup_vs_start"],
                "speedup_vs_best": best.get("speedup_vs_best") or math.nan,
                "speedup_vs_eager": best.get("speedup_vs_eager") or math.nan,
                "speedup_vs_start_range": best["speedup_vs_start_range"],
                "found": found,
                "shapes": _per_shape(best.get("shapes", []))}

    def _first_record(self, candidate_id: str) -> dict[str, Any] | None:
        """``candidate_id``'s first OK record in the run's Parquet, as figures."""
        try:
            rows = read_evaluations(self.path).to_pylist()
        except FileNotFoundError:
            return None
        mine = [r for r in rows if r["candidate_id"] == candidate_id and r["status"] == "OK"]
        if not mine:
            return None
        seq = min(r["seq"] for r in mine)
        shapes = [r for r in mine if r["seq"] == seq]

        def geomean(column: str) -> float:
            values = [r.get(column) for r in shapes]
            if not values or any(v is None or not v > 0 for v in values):
                return math.nan
            return math.exp(sum(math.log(v) for v in values) / len(values))

        return {"seq": seq, "speedup_vs_start": geomean("speedup_vs_start"),
                "speedup_vs_best": geomean("speedup_vs_best"),
                "speedup_vs_eager": geomean("speedup_vs_eager"),
                "shapes": _per_shape(shapes)}


def _per_shape(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per shape label, the figures eval prints beside its own (from Parquet rows or from
    summary.json's per-shape figures: the same keys)."""
    return {r["shape"]: {"time_us": r["time_us"], "speedup_vs_start": r["speedup_vs_start"],
                         "speedup_vs_best": r.get("speedup_vs_best"),
                         "best_baseline": r.get("best_baseline") or ""} for r in rows}


def run_folder_of(file: Path) -> Path | None:
    """The run folder a kernel file lives in (``RUN_DIR/best/`` or ``RUN_DIR/candidates/``)."""
    folder = file.resolve().parent
    if folder.name in KERNEL_FOLDERS and (folder.parent / "config.json").is_file():
        return folder.parent
    return None


def open_run_folder(path: Path) -> RunFolder:
    """The run folder at ``path`` with its settings; ``ConfigError`` naming what is missing."""
    from .prepare import CHECKS_FILE, evaluator_settings

    path = Path(path).expanduser().resolve()
    config = load_run_config(path)
    settings = evaluator_settings(config)
    timing_file = path / TIMING_FILE
    if timing_file.is_file():  # what the run timed with, whatever its config's defaults became
        try:
            settings = TimingSettings.read(path).apply(settings)
        except ValueError as exc:
            raise ConfigError(f"{timing_file}: {exc}") from None
    checks_file = path / CHECKS_FILE
    if checks_file.is_file():  # the tester's extra checks every candidate of the run passed
        try:
            settings = replace(settings, extra_checks=tuple(json.loads(checks_file.read_text())))
        except ValueError as exc:
            raise ConfigError(f"{checks_file}: not valid JSON: {exc}") from None
    return RunFolder(path, config, settings)
