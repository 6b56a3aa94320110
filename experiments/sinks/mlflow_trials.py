"""The MLflow sink of a knob study: one parent run per ``kernelswarm tune`` session, one child
run per evaluated trial.

Parent run: the flattened configuration and the study's settings as params; tags ``study``,
``storage`` and the run folder; metrics ``trial_speedup`` and ``best_speedup`` with step = the
trial number; at the end the best kernel (``best/<id>.<ext>``, ``best.json``). Child run
``trial-<n>``: params = the knob values; tags ``trial``, ``candidate_id``, ``status`` (and
``message`` for a failed one); metrics ``speedup``, ``speedup_vs_eager``, ``correct``,
``compile_s``, ``eval_s`` and per shape ``time_us/<shape>`` and ``speedup/<shape>`` (the shape
label with MLflow's forbidden characters as ``_``). Every trial compiles the same source, so
only the best kernel is logged as an artifact.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from kernelswarm.search import Record, RunInfo, RunSummary

from .mlflow_sink import MLflowSink
from .mlflow_store import param_key, param_value

TAG_LIMIT = 5000


class TrialMLflowSink(MLflowSink):
    """``MLflowSink`` with a child run per record (a trial) instead of per lineage."""

    def __init__(self, tracking_uri: str, experiment: str,
                 tags: dict[str, str] | None = None) -> None:
        super().__init__(tracking_uri, experiment, candidate_sources=False)
        self.tags = dict(tags or {})
        self.trial_run_ids: dict[int, str] = {}

    def open(self, run: RunInfo) -> None:
        from mlflow.entities import RunTag

        super().open(run)
        client, _ = self._opened()
        if self.tags:
            client.log_batch(self.parent_run_id,
                             tags=[RunTag(k, v[:TAG_LIMIT]) for k, v in self.tags.items()])

    def _log_records(self, records: Sequence[Record]) -> None:
        for record in records:  # a run per trial: nothing to gather across records
            self._log(record)

    def _log(self, record: Record) -> None:
        from mlflow.entities import Metric, Param, RunTag

        client, run = self._opened()
        evaluation, candidate, trial = record.evaluation, record.candidate, record.step
        tags = {"mlflow.parentRunId": self.parent_run_id, "run_id": run.run_id,
                "trial": str(trial), "candidate_id": candidate.id,
                "status": evaluation.status.value}
        if not evaluation.ok:
            tags["message"] = evaluation.message[:TAG_LIMIT]
        child = client.create_run(self.experiment_id, tags=tags,
                                  run_name=f"trial-{trial}").info.run_id
        self.trial_run_ids[trial] = child
        millis = int(record.timestamp * 1000)
        values = {"speedup": evaluation.speedup, "speedup_vs_eager": evaluation.speedup_vs_eager,
                  "correct": float(evaluation.ok), "compile_s": evaluation.compile_s,
                  "eval_s": evaluation.eval_s}
        for shape in evaluation.shapes:
            values[param_key(f"time_us/{shape.shape}")] = shape.time_us
            values[param_key(f"speedup/{shape.shape}")] = shape.speedup_vs_start
        client.log_batch(
            child,
            metrics=[Metric(k, float(v), millis, 0) for k, v in values.items() if math.isfinite(v)],
            params=[Param(param_key(k), param_value(v)) for k, v in candidate.knobs])
        client.set_terminated(child, "FINISHED")
        client.log_batch(self.parent_run_id, metrics=[
            Metric("trial_speedup", evaluation.speedup, millis, trial),
            Metric("best_speedup", record.global_best, millis, trial)],
            tags=[RunTag("last_trial", str(trial))])

    def close(self, summary: RunSummary) -> None:
        from mlflow.entities import Metric, RunTag

        client, _ = self._opened()
        if summary.best is not None:
            self._log_best(self.parent_run_id, *summary.best)
        millis = int(time.time() * 1000)
        client.log_batch(self.parent_run_id,
                         metrics=[Metric("wall_s", summary.wall_s, millis, 0)],
                         tags=[RunTag("stop_reason", summary.stop_reason[:TAG_LIMIT])])
        self._terminate("FINISHED")
