"""The MLflow sink: a run as MLflow shows it — one parent run, one child run per lineage.

The parent run carries the flattened config as params, the global best per record (step = seq)
and, at the end, the best kernel. Each lineage's child run carries its step metrics
(step = the lineage's step), the sources it tried and its own best kernel.

Artifacts: on a local ``sqlite:///<path>`` store a new experiment's artifacts go to
``<database folder>/mlartifacts/<experiment>``, never to whatever the working folder happens to
be; against a tracking server the server decides. A relative sqlite path is made absolute when
the sink is built, so a sink shipped to another process on the same machine writes to the same
database.
"""

from __future__ import annotations

import json
import math
import re
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelswarm.search import (
    Candidate,
    Evaluation,
    Record,
    RunInfo,
    RunSummary,
    Sink,
    Usage,
    stored_detail,
)

from .llm_trace import TRACE_FOLDER, TraceFollower, call_artifact, call_metrics
from .mlflow_layout import SteadyMetrics, parent_run_name, previewable, run_tags, shape_table
from .mlflow_runs import earlier_runs, log_params
from .mlflow_store import absolute_uri, mlflow_client, param_key, param_value, sqlite_path
from .sources import source_file_name

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

# MLflow's own limit (mlflow.utils.validation; params: mlflow_runs.py); exceeding it fails
# the whole call.
METRICS_PER_BATCH = 1000
# MLflow 3's UI shows an experiment of this kind as a table of runs and their metrics.
EXPERIMENT_KIND, TRAINING_KIND = "mlflow.experimentKind", "custom_model_development"


def run_name(lineage: int) -> str:
    """A lineage's child run name; negative lineages hold the starting kernel's evaluation."""
    return "start" if lineage < 0 else f"lineage-{lineage}"


def lineage_params(lineage: int, params: Mapping[str, Any]) -> dict[str, Any]:
    """A child run's params: its lineage, and the config's seeds and models (keys ending in
    ``seed`` or ``model``), which are what differs between lineages in a comparison."""
    chosen = {key: value for key, value in params.items()
              if key.rsplit(".", 1)[-1] == "seed" or key.endswith("model")}
    return {"lineage": lineage, **chosen}


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None  # strict JSON has no NaN


def best_json(candidate: Candidate, evaluation: Evaluation) -> str:
    """What ``best.json`` holds: the kernel's identity, knobs and per-shape results."""
    shapes = [{key: _finite(value) if isinstance(value, float) else value
               for key, value in asdict(result).items()} for result in evaluation.shapes]
    return json.dumps({
        "candidate_id": candidate.id,
        "language": candidate.language,
        "entry": candidate.entry,
        "lineage": candidate.lineage,
        "parents": list(candidate.parents),
        "knobs": candidate.knob_values,
        "origin": {"role": candidate.origin.role, "move": candidate.origin.move,
                   "model": candidate.origin.model},
        "status": evaluation.status.value,
        "speedup": _finite(evaluation.speedup),
        "speedup_vs_eager": _finite(evaluation.speedup_vs_eager),
        "speedup_vs_best": _finite(evaluation.speedup_vs_best),
        "speedup_vs_best_ci": _finite(evaluation.geomean_ci("speedup_vs_best")),
        "device": evaluation.device,
        "shapes": shapes,
    }, indent=2, default=str)


_METRIC_KEY = re.compile(r"[^A-Za-z0-9_.\- /]")
MAX_PROFILE_METRICS = 200


def profile_metrics(evaluation: Evaluation) -> dict[str, float]:
    """The numbers of an evaluation's profile as MLflow metrics: per-shape time and roofline
    fraction, and every finite number in ``resources`` and ``metrics`` (nested keys joined with
    dots, e.g. ``profile.ncu.dram_throughput_pct``); at most ``MAX_PROFILE_METRICS``."""
    out: dict[str, float] = {}
    for shape in evaluation.shapes:
        for name in ("time_us", "roofline_fraction", "speedup_vs_start", "speedup_vs_best"):
            out[f"shape.{shape.shape}.{name}"] = getattr(shape, name)

    def walk(prefix: str, value: object, depth: int) -> None:
        if isinstance(value, bool):
            out[prefix] = float(value)
        elif isinstance(value, (int, float)):
            out[prefix] = float(value)
        elif isinstance(value, Mapping) and depth < 3:
            for key, item in value.items():
                walk(f"{prefix}.{key}", item, depth + 1)

    resources, metrics = stored_detail(evaluation)  # the names these metrics always had
    walk("resource", resources, 0)
    walk("profile", metrics, 0)
    clean = {_METRIC_KEY.sub("_", k)[:250]: v for k, v in out.items() if math.isfinite(v)}
    return dict(list(clean.items())[:MAX_PROFILE_METRICS])


class MLflowSink(Sink):
    """Logs the run to MLflow through ``MlflowClient`` with explicit run ids.

    Built from plain strings and picklable until ``open``, which creates the client, so it can be
    shipped to another process first. ``write`` is called from a background thread: the
    tracker's in one process; on Ray, a ``SinkActor``'s, in a process of its own
    (cluster/sink_actor.py). Its cost is MLflow's store's: per record, nine metric rows on its
    lineage's run, up to four per shape and two on the parent run. A failing store makes
    ``write`` raise (the tracker then disables the sink) after marking the runs FAILED where it
    still can.
    """

    durable = False

    def __init__(self, tracking_uri: str, experiment: str, *, candidate_sources: bool = True,
                 nested_in: str = "", resumed: bool = False) -> None:
        self.tracking_uri = absolute_uri(tracking_uri)
        self.experiment = experiment
        self.nested_in = nested_in  # a sweep's MLflow run: this run becomes one of its children
        self.resumed = resumed  # a run continued from its folder goes on in its MLflow runs
        self.candidate_sources = candidate_sources  # log every candidate's source on its child run
        self.experiment_id = ""
        self.parent_run_id = ""
        self.lineage_run_ids: dict[int, str] = {}
        self._client: MlflowClient | None = None
        self._run: RunInfo | None = None
        self._tally: dict[int, tuple[int, int]] = {}  # lineage -> (correct, total)
        self._llm: TraceFollower | None = None  # the LLM roles' call traces, if any
        self._llm_totals: dict[int, dict[str, Usage]] = {}  # lineage -> role -> usage
        self._steady: dict[int, SteadyMetrics] = {}  # lineage -> profile figures held back
        self._resumed: set[int] = set()  # lineages whose MLflow run an earlier session made

    def __getstate__(self) -> dict[str, Any]:
        # A client holds connections; the receiving process makes its own in open().
        return {**self.__dict__, "_client": None}

    def open(self, run: RunInfo) -> None:
        database = sqlite_path(self.tracking_uri)
        if database is not None:  # sqlite will not create the folder it is asked to write into
            database.parent.mkdir(parents=True, exist_ok=True)
        self._client = client = mlflow_client(self.tracking_uri)
        self._run = run
        self._llm = TraceFollower(run.run_dir / TRACE_FOLDER)
        self.experiment_id = self.find_or_create_experiment(client)
        tags = {**run_tags(run), "run_id": run.run_id, "run_dir": str(run.run_dir),
                "lineages": str(run.lineages)}
        if self.nested_in:
            tags["mlflow.parentRunId"] = self.nested_in
        params = {param_key(str(k)): param_value(v) for k, v in run.params.items()}
        earlier = (earlier_runs(client, self.experiment_id, run.run_id, str(run.run_dir))
                   if self.resumed else None)
        if earlier is None:
            self.parent_run_id = client.create_run(self.experiment_id, tags=tags,
                                                   run_name=parent_run_name(run)).info.run_id
        else:  # resumed: the run's parent and lineage runs go on
            self.parent_run_id, self.lineage_run_ids = earlier[0], dict(earlier[1])
            self._resumed = set(self.lineage_run_ids)
            for run_id in self.lineage_run_ids.values():
                client.update_run(run_id, status="RUNNING")
            client.update_run(self.parent_run_id, status="RUNNING", name=parent_run_name(run))
        log_params(client, self.parent_run_id, params, resumed=earlier is not None)

    def find_or_create_experiment(self, client: MlflowClient) -> str:
        """The id of the sink's experiment, created (as the UI's runs-table kind, artifacts
        beside a sqlite store) when it does not exist; a deleted one is refused."""
        from mlflow.exceptions import MlflowException

        found = client.get_experiment_by_name(self.experiment)
        if found is None:
            try:  # the UI opens it on its runs table, not on the GenAI traces overview
                return client.create_experiment(self.experiment, tags={
                    EXPERIMENT_KIND: TRAINING_KIND}, artifact_location=self._artifact_location())
            except MlflowException:
                found = client.get_experiment_by_name(self.experiment)  # created concurrently
                if found is None:
                    raise
        if found.lifecycle_stage == "deleted":
            raise ValueError(
                f"MLflow experiment {self.experiment!r} at {self.tracking_uri} is deleted: restore "
                f"it (mlflow experiments restore --experiment-id {found.experiment_id}) or choose "
                f"another experiment name")
        if found.tags.get(EXPERIMENT_KIND) is None:
            client.set_experiment_tag(found.experiment_id, EXPERIMENT_KIND, TRAINING_KIND)
        return found.experiment_id

    def _artifact_location(self) -> str | None:
        database = sqlite_path(self.tracking_uri)
        if database is None:
            return None  # a server or another store decides where artifacts go
        folder = re.sub(r"[^\w.\-]", "_", self.experiment) or "experiment"
        return (database.resolve().parent / "mlartifacts" / folder).as_uri()

    def _opened(self) -> tuple[MlflowClient, RunInfo]:
        if self._client is None or self._run is None:
            raise RuntimeError("MLflowSink used before open()")
        return self._client, self._run

    def _lineage_run(self, lineage: int) -> str:
        if lineage in self.lineage_run_ids:
            return self.lineage_run_ids[lineage]
        from mlflow.entities import Param

        client, run = self._opened()
        tags = {**run_tags(run), "mlflow.parentRunId": self.parent_run_id, "run_id": run.run_id,
                "lineage": str(lineage)}
        run_id = client.create_run(self.experiment_id, tags=tags,
                                   run_name=run_name(lineage)).info.run_id
        params = lineage_params(lineage, run.params)
        client.log_batch(run_id, params=[Param(param_key(k), param_value(v))
                                         for k, v in params.items()])
        self.lineage_run_ids[lineage] = run_id
        return run_id

    def write(self, record: Record) -> None:
        self.write_batch([record])

    def write_batch(self, records: Sequence[Record]) -> None:
        """Log the records with one ``log_batch`` per run (up to MLflow's limit per call) and
        one artifact upload per run for the candidates' sources, instead of a few store round
        trips per record: what keeps up with many GPUs."""
        try:
            self._log_records(records)
        except Exception:
            self._terminate("FAILED")  # the tracker disables this sink: no close() will come
            raise

    def _log_records(self, records: Sequence[Record]) -> None:
        from mlflow.entities import Metric

        client, _ = self._opened()
        points: dict[str, list[Metric]] = {}
        sources: dict[str, dict[str, str]] = {}  # run id -> artifact path -> text
        for record in records:
            child = self._lineage_run(record.lineage)
            points.setdefault(child, []).extend(Metric(*p) for p in self._points(record))
            points.setdefault(self.parent_run_id, []).extend([
                Metric("global_best", record.global_best, int(record.timestamp * 1000),
                       record.seq),
                Metric("diversity", record.diversity, int(record.timestamp * 1000), record.seq)])
            if self.candidate_sources:
                path = previewable(f"candidates/{source_file_name(record.candidate)}")
                sources.setdefault(child, {})[path] = record.candidate.source
        for run_id, metrics in points.items():
            for start in range(0, len(metrics), METRICS_PER_BATCH):
                client.log_batch(run_id, metrics=metrics[start:start + METRICS_PER_BATCH])
        for run_id, texts in sources.items():
            self._log_texts(client, run_id, texts)
        for lineage in dict.fromkeys(record.lineage for record in records):
            self._log_llm_calls(lineage)

    @staticmethod
    def _log_texts(client: MlflowClient, run_id: str, texts: dict[str, str]) -> None:
        """Several text artifacts of one run in one upload (one ``log_text`` for a single one)."""
        if len(texts) == 1:
            [(path, text)] = texts.items()
            client.log_text(run_id, text, path)
            return
        with tempfile.TemporaryDirectory() as folder:
            for path, text in texts.items():
                target = Path(folder) / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
            client.log_artifacts(run_id, folder)

    def _points(self, record: Record) -> list[tuple[str, float, int, int]]:
        """The (key, value, millis, step) points of one record for its lineage's run."""
        evaluation = record.evaluation
        correct, total = self._tally.get(record.lineage, (0, 0))
        correct, total = correct + evaluation.ok, total + 1
        self._tally[record.lineage] = (correct, total)
        millis = int(record.timestamp * 1000)
        values = {
            "candidate_speedup": evaluation.speedup,
            "best_speedup": record.lineage_best,
            "candidate_speedup_vs_best_baseline": evaluation.speedup_vs_best,
            "correct": float(evaluation.ok),
            "correct_rate": correct / total,
            "compile_s": evaluation.compile_s,
            "eval_s": evaluation.eval_s,
            "tokens": float(record.candidate.origin.tokens),
            "cost_usd": record.candidate.origin.cost_usd,
            **profile_metrics(evaluation),
        }
        # Figures that stay the same on every evaluation wait; they end up as params (close).
        return self._steady.setdefault(record.lineage, SteadyMetrics()).observe(
            {key: float(value) for key, value in values.items()}, millis, record.step)

    def _log_llm_calls(self, lineage: int) -> None:
        """The lineage's LLM calls since the last time, into its child run: per call, metrics
        stepped by the call's index and an artifact with the prompt and the answer."""
        from mlflow.entities import Metric

        calls = self._llm.new_calls(lineage) if self._llm is not None else []
        if not calls:
            return
        client, _ = self._opened()
        run_id = self._lineage_run(lineage)
        totals = self._llm_totals.setdefault(lineage, {})
        metrics = []
        for index, call in calls:
            totals[call.role] = totals.get(call.role, Usage()) + call.usage()
            millis = int((call.started or time.time()) * 1000)
            metrics += [Metric(k, v, millis, index) for k, v in call_metrics(call).items()]
            path, text = call_artifact(index, call)
            client.log_text(run_id, text, path)
        for start in range(0, len(metrics), METRICS_PER_BATCH):
            client.log_batch(run_id, metrics=metrics[start:start + METRICS_PER_BATCH])

    def _close_llm(self, millis: int) -> list[Any]:
        """Log the calls not yet logged and each lineage's totals per role; the run's totals."""
        from mlflow.entities import Metric

        for lineage in self._llm.lineages() if self._llm is not None else []:
            self._log_llm_calls(lineage)
        client, _ = self._opened()
        run_total = Usage()
        for lineage, roles in sorted(self._llm_totals.items()):
            values: dict[str, float] = {}
            for role, usage in roles.items():
                values.update(usage.metrics(f"llm.{role}"))
                run_total = run_total + usage
            client.log_batch(self._lineage_run(lineage),
                             metrics=[Metric(k, v, millis, 0) for k, v in values.items()])
        if not self._llm_totals:
            return []
        return [Metric(k, v, millis, 0) for k, v in run_total.metrics("llm").items()]

    def close(self, summary: RunSummary) -> None:
        from mlflow.entities import Metric, RunTag

        client, _ = self._opened()
        if summary.best is not None:
            self._log_best(self.parent_run_id, *summary.best)
        for lineage, best in sorted(summary.lineage_best.items()):
            self._log_best(self._lineage_run(lineage), *best)
        self._log_constants()
        millis = int(time.time() * 1000)
        best_speedup = summary.best[1].speedup if summary.best is not None else 0.0
        vs_baseline = summary.best[1].speedup_vs_best if summary.best is not None else 0.0
        metrics = [Metric("best_speedup", best_speedup, millis, 0),
                   Metric("best_speedup_vs_best_baseline", vs_baseline, millis, 0),
                   Metric("records", float(summary.records), millis, 0),
                   # the tracker's clock, as summary.json's search_wall_s; the run's whole
                   # wall time (Ray's start and the starting kernel included) is logged as
                   # wall_s once summary.json is written (report/mlflow_figures.py)
                   Metric("search_wall_s", summary.wall_s, millis, 0),
                   Metric("migrations", float(summary.migrations), millis, 0),
                   Metric("reused_verdicts", float(summary.reused), millis, 0),
                   Metric("novelty_rejected", float(summary.rejected), millis, 0),
                   Metric("screened_out", float(summary.screened_out), millis, 0),
                   Metric("screen_saved_s", summary.screen_saved_s, millis, 0),
                   *self._close_llm(millis)]
        client.log_batch(self.parent_run_id, metrics=metrics,
                         tags=[RunTag("stop_reason", summary.stop_reason[:8000])])
        self._terminate("FINISHED")

    def _log_best(self, run_id: str, candidate: Candidate, evaluation: Evaluation) -> None:
        client, _ = self._opened()
        client.log_text(run_id, candidate.source,
                        previewable(f"best/{source_file_name(candidate)}"))
        client.log_text(run_id, best_json(candidate, evaluation), "best.json")
        if evaluation.shapes:  # the UI's table view of the best kernel, shape by shape
            client.log_table(run_id, shape_table(evaluation), "best_shapes.json")

    def _log_constants(self) -> None:
        """Each lineage's profile figures that never changed, as params of its run."""
        client, _ = self._opened()
        for lineage, steady in sorted(self._steady.items()):
            log_params(client, self._lineage_run(lineage),
                             {param_key(k): param_value(v) for k, v in steady.constants().items()},
                             resumed=lineage in self._resumed)

    def _terminate(self, status: str) -> None:
        if self._client is None:
            return
        errors: list[Exception] = []
        for run_id in [*self.lineage_run_ids.values(), self.parent_run_id]:
            if run_id:
                try:
                    self._client.set_terminated(run_id, status)
                except Exception as exc:  # try every run before giving up
                    errors.append(exc)
        # Marking FAILED is best effort (the store may be what failed); FINISHED must succeed.
        if errors and status == "FINISHED":
            raise errors[0]

    def location(self) -> str:
        text = f"MLflow {self.tracking_uri}, experiment {self.experiment!r}"
        if self.parent_run_id:
            text += f", run {self.parent_run_id}"
        if sqlite_path(self.tracking_uri) is not None:
            text += f"\nbrowse: mlflow ui --backend-store-uri {self.tracking_uri}"
        elif self.tracking_uri.startswith(("http://", "https://")) and self.parent_run_id:
            text += (f" ({self.tracking_uri.rstrip('/')}/#/experiments/{self.experiment_id}"
                     f"/runs/{self.parent_run_id})")
        return text
