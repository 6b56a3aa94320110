"""Reading back what ``MLflowSink`` logged: a parent run and its lineages' child runs."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .mlflow_store import absolute_uri, mlflow_client, param_key

# MLflow's limit of params in one log_batch (mlflow.utils.validation); more fails the call.
PARAMS_PER_BATCH = 100

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient


@dataclass(frozen=True)
class LoggedRun:
    """One MLflow run as logged: metric histories are ``key -> [(step, value), ...]`` by step."""

    run_id: str
    name: str
    status: str
    params: dict[str, str]
    tags: dict[str, str]
    metrics: dict[str, list[tuple[int, float]]]
    artifacts: tuple[str, ...]  # paths relative to the run's artifact root, files only


@dataclass(frozen=True)
class LoggedSearch:
    """A kernelswarm run in MLflow: the parent run and one child run per lineage."""

    parent: LoggedRun
    lineages: dict[int, LoggedRun]


def read_mlflow_run(tracking_uri: str, parent_run_id: str) -> LoggedSearch:
    """The parent run ``parent_run_id`` and its lineages' runs, with full metric histories."""
    client = mlflow_client(tracking_uri)
    parent = client.get_run(parent_run_id)
    children: dict[int, LoggedRun] = {}
    page_token = None
    while True:
        page = client.search_runs(
            [parent.info.experiment_id],
            filter_string=f"tags.`mlflow.parentRunId` = '{parent_run_id}'",
            page_token=page_token)
        for run in page:
            children[int(run.data.tags["lineage"])] = _logged(client, run.info.run_id)
        page_token = page.token
        if not page_token:
            break
    return LoggedSearch(_logged(client, parent_run_id), children)


def read_artifact_text(tracking_uri: str, run_id: str, path: str) -> str:
    """The text of one artifact of a run (e.g. ``best.json``)."""
    client = mlflow_client(tracking_uri)
    with tempfile.TemporaryDirectory() as folder:
        return Path(client.download_artifacts(run_id, path, folder)).read_text()


def _logged(client: MlflowClient, run_id: str) -> LoggedRun:
    run = client.get_run(run_id)
    metrics = {}
    for key in run.data.metrics:
        history = sorted(client.get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp))
        metrics[key] = [(m.step, m.value) for m in history]
    return LoggedRun(run_id=run_id, name=run.info.run_name, status=run.info.status,
                     params=dict(run.data.params), tags=dict(run.data.tags), metrics=metrics,
                     artifacts=tuple(sorted(_artifact_files(client, run_id, None))))


def _artifact_files(client: MlflowClient, run_id: str, folder: str | None) -> list[str]:
    files = []
    for entry in client.list_artifacts(run_id, folder):
        if entry.is_dir:
            files.extend(_artifact_files(client, run_id, entry.path))
        else:
            files.append(entry.path)
    return files


def find_parent_run(tracking_uri: str, experiment: str, run_id: str,
                    run_dir: str | None = None) -> tuple[str, str] | None:
    """(MLflow run id, experiment id) of the parent run ``MLflowSink`` made for the kernelswarm
    run ``run_id`` (its folder's name) in ``experiment``, the latest if there are several (one
    in ``run_dir`` first: sweeps' cell folders share names); None when there is none."""
    client = mlflow_client(tracking_uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return None
    runs = client.search_runs([found.experiment_id], filter_string=f"tags.run_id = '{run_id}'")
    # A sweep's cell run is nested under the sweep's run: lineage runs are told by their tag.
    parents = [r for r in runs if "lineage" not in r.data.tags]
    if run_dir is not None:
        parents = [r for r in parents if r.data.tags.get("run_dir") == run_dir] or parents
    return (parents[0].info.run_id, found.experiment_id) if parents else None


def earlier_runs(client: MlflowClient, experiment_id: str, run_id: str,
                 run_dir: str) -> tuple[str, dict[int, str]] | None:
    """(parent run id, lineage -> child run id) that an earlier session of the kernelswarm run
    ``run_id`` in ``run_dir`` logged (a ``--resume``, or a restarted tracker), so that a run
    keeps one MLflow parent run however often it is continued; None for a new run."""
    runs = client.search_runs([experiment_id], filter_string=f"tags.run_id = '{run_id}'")
    parents = [r for r in runs if "lineage" not in r.data.tags
               and r.data.tags.get("run_dir") == run_dir]
    if not parents:
        return None
    parent = parents[0].info.run_id  # the latest, should there be several from before
    children = {int(r.data.tags["lineage"]): r.info.run_id for r in runs
                if "lineage" in r.data.tags and r.data.tags.get("mlflow.parentRunId") == parent}
    return parent, children


def mark_failed(tracking_uri: str, experiment: str, run_id: str, run_dir: str,
                reason: str) -> str | None:
    """Mark the MLflow runs of the kernelswarm run ``run_id`` FAILED, the parent tagged
    ``failure`` with ``reason``; the parent's MLflow run id, or None when it logged none."""
    client = mlflow_client(absolute_uri(tracking_uri))
    found = client.get_experiment_by_name(experiment)
    earlier = earlier_runs(client, found.experiment_id, run_id, run_dir) if found else None
    if earlier is None:
        return None
    parent, children = earlier
    client.set_tag(parent, "failure", reason[:8000])
    for child in (*children.values(), parent):
        client.set_terminated(child, "FAILED")
    return parent


def log_params(client: MlflowClient, run_id: str, params: dict[str, str],
               resumed: bool) -> None:
    """Log ``params`` on ``run_id``. MLflow refuses to change a logged param: in a resumed
    run, a value that changed (a larger budget, a profile figure measured again) is logged as
    the tag ``resumed.<key>``."""
    from mlflow.entities import Param, RunTag

    logged = client.get_run(run_id).data.params if resumed else {}
    entries = [Param(key, value) for key, value in params.items() if key not in logged]
    changed = [RunTag(param_key(f"resumed.{key}"), value) for key, value in params.items()
               if key in logged and logged[key] != value]
    for start in range(0, max(len(entries), len(changed)), PARAMS_PER_BATCH):
        client.log_batch(run_id, params=entries[start:start + PARAMS_PER_BATCH],
                         tags=changed[start:start + PARAMS_PER_BATCH])
