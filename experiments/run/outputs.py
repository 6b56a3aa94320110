"""What a run leaves in its folder once it ends: ``summary.json`` (every figure a user reads
in the closing table, each labelled: confirmed or not, baseline times carried over from their
cached measurement by a stated factor, null where a baseline was not measured) and ``best/``."""

from __future__ import annotations

import json
import math
from pathlib import Path

from kernelswarm.cluster import SwarmResult, write_activity
from kernelswarm.evaluators import TimingSettings
from kernelswarm.search import Candidate, Confirmation, Evaluation, read_dispatch_table

from ..sinks.sources import self_contained_source, source_file_name
from ..views.carried_baselines import MeasuredBaselines, baseline_scales, measured_of_run
from ..views.language_summary import languages_document
from ..views.speedups import finite, kernel_figures


def write_best_kernel(run_dir: Path, candidate: Candidate) -> Path:
    """The best kernel's source as ``run_dir/best/<id>.<ext>``, with the knob values it was
    judged with at the top (self-contained: see experiments/sinks/sources.py); returns its path.
    A dispatch kernel's table (search/dispatch.py), which its first line holds, is also written
    as ``best/dispatch/<id>.json`` for a launcher of the user's own (a folder of its own: the
    kernel stays the one ``best/<id>.*`` file)."""
    path = run_dir / "best" / source_file_name(candidate)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(self_contained_source(candidate))
    table = read_dispatch_table(candidate.source)
    if table is not None:
        (path.parent / "dispatch").mkdir(exist_ok=True)
        (path.parent / "dispatch" / f"{candidate.id}.json").write_text(
            json.dumps(table.to_json(), indent=2, sort_keys=True) + "\n")
    return path


def write_outputs(run_dir: Path, result: SwarmResult, timing: TimingSettings,
                  llm: dict | None = None, wall_s: float | None = None) -> Path | None:
    """``summary.json`` and ``best/``; the best kernel's file, or None. ``wall_s``: the run's
    wall time from its start (Ray, the actors and the starting kernel included); None: the
    search's own, from the tracker's start."""
    summary = result.summary
    best_path = None
    if summary.best is not None:
        best_path = write_best_kernel(run_dir, summary.best[0])
    lineage_best = dict(summary.lineage_best)  # the tracker's: the one per-lineage source
    start = result.start
    measured = measured_baselines(run_dir, result)
    doc = {
        "stop_reason": summary.stop_reason, "records": summary.records,
        "wall_s": summary.wall_s if wall_s is None else wall_s,
        "search_wall_s": summary.wall_s,  # the tracker's clock, as MLflow logs it
        # from the run's start to the search's (outside search.wall_time_s); null: the search
        # never started (a starting kernel failed its task)
        "startup_s": result.startup_s if math.isfinite(result.startup_s) else None,
        "timing": {**timing.as_dict(), "regime": timing.regime},
        "baselines": {**start.baselines.as_dict(),
                      # the cached times the figures below were carried over from
                      **(measured.document() if measured is not None else {})}
        if start is not None and start.baselines else {"error": "not measured"},
        "best": None if summary.best is None else {
            "candidate_id": summary.best[0].id, "language": summary.best[0].language,
            "lineage": summary.best[0].lineage,  # the lineage that proposed it
            "knobs": summary.best[0].knob_values,
            **_best_figures(summary.best[1], measured), "file": str(best_path),
            # over the reference language's starting kernel: how languages were ranked
            "speedup_vs_reference": result.scales.speedup(*summary.best),
            **_confirmed_figures(result.confirmation)},
        # each language's best (search.languages; one entry in a single-language run)
        "languages": languages_document(result, run_dir),
        # the best kernels judged again after the search (search/confirm.py); null: not done
        "confirmation": result.confirmation.as_dict() if result.confirmation else None,
        "lineages": [{"lineage": r.lineage, "language": result.language_of(r.lineage),
                      "steps": r.steps, "stop_reason": r.stop_reason,
                      "best_candidate": lineage_best[r.lineage][0].id
                      if r.lineage in lineage_best else None,
                      "best_speedup": lineage_best[r.lineage][1].speedup
                      if r.lineage in lineage_best else 0.0,
                      "best_speedup_vs_best_baseline": lineage_best[r.lineage][1].speedup_vs_best
                      if r.lineage in lineage_best else 0.0,
                      "error": r.error,
                      # crashes it was restarted from its records after (cluster/swarm.py)
                      "restarts": r.restarts, "crashes": list(r.crashes)}
                     for r in result.lineages],
        "sink_errors": result.sink_errors, "utilisation": result.utilisation,
        # the evaluation workers' busy fractions, evaluations a minute, calibrations and GPUs
        # (workers.json holds what each worker did and when; cluster/activity.py)
        "workers": write_activity(run_dir, result.activity) if result.activity else None,
        "diversity": summary.diversity, "migrations": summary.migrations,
        "reused_verdicts": summary.reused,
        # the search strategy and its figures (kept kernels and families, cells, migrations),
        # and the candidates novelty rejection kept from being judged
        "strategy": summary.strategy, "novelty_rejected": summary.rejected,
        # candidates screened out (search.screen_shapes) and the timing seconds that saved
        "screening": {"screened_out": summary.screened_out,
                      "saved_s": summary.screen_saved_s},
        "population": summary.population,
        "extra_checks_dropped": dict(start.dropped_checks) if start is not None else {},
        "llm": llm,  # tokens and dollars per role, lineage and in all (null without LLM roles)
    }
    tmp = run_dir / "summary.json.tmp"
    tmp.write_text(json.dumps(finite(doc), indent=2))
    tmp.replace(run_dir / "summary.json")
    return best_path


def measured_baselines(run_dir: Path, result: SwarmResult) -> MeasuredBaselines | None:
    """The cache entry the run's baseline times were carried over from (views/
    carried_baselines.py), with the best kernel's language's starting kernel (whose time now
    over then carried its figures); None when it is gone or the baselines were not
    measured."""
    source = result.start.baselines if result.start is not None else None
    if source is None or not (run_dir / "config.json").is_file():
        return None
    config = json.loads((run_dir / "config.json").read_text())
    best = result.summary.best
    return measured_of_run(config, source.as_dict(), best[0].language if best else "")


def _best_figures(evaluation: Evaluation, measured: MeasuredBaselines | None) -> dict:
    """``kernel_figures``, each shape with the factor its baseline times were carried over by
    (``baseline_scale``: the starting kernel's time now over then)."""
    figures = kernel_figures(evaluation)
    if measured is not None:
        scales = baseline_scales(evaluation, measured)
        for shape in figures["shapes"]:
            shape["baseline_scale"] = scales[shape["shape"]]
    return figures


def _confirmed_figures(confirmation: Confirmation | None) -> dict:
    """What summary.json's best says of its confirmation: the figure the search found it at,
    and the lowest and highest of its repeats (the spread a later ``eval`` falls in)."""
    chosen = confirmation.chosen if confirmation else None
    if chosen is None:  # the search's own single measurement, which favours a lucky one
        why = confirmation.skipped if confirmation is not None else ""
        return {"confirmed": False, "unconfirmed_reason": why or "not run"}
    low, high = chosen.spread("speedup")
    seeds = confirmation.seeds
    return {"confirmed": True, "repeats": len(chosen.repeats),
            # how many secret seeds its repeats were checked on (0: its evaluator draws no
            # inputs of its own); the values are the confirmation's ``secret_seeds``
            "secret_seeds": len(seeds.values)
            if seeds is not None and all(seeds.checked(e) for e in chosen.repeats) else 0,
            "speedup_vs_start_range": [low, high],
            "speedup_vs_best_range": list(chosen.spread("speedup_vs_best")),
            "found_speedup_vs_start": chosen.found.speedup,
            "found_speedup_vs_best": chosen.found.speedup_vs_best}
