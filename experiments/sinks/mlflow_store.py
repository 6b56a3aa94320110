"""Where a run's MLflow data lives, and names and values MLflow accepts: the client for a
tracking URI, the database of a ``sqlite:///`` URI, and keys and params cut to MLflow's limits
(exceeding them fails the whole call)."""

from __future__ import annotations

import json
import posixpath
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

# MLflow's own limits (mlflow.utils.validation).
PARAM_VALUE_LIMIT = 6000
KEY_LIMIT = 250


def mlflow_client(tracking_uri: str) -> MlflowClient:
    """A client bound to this URI; mlflow is imported here so that merely importing the sinks
    (for Parquet) does not pay for it."""
    try:
        from mlflow.tracking import MlflowClient
    except ImportError as exc:  # pragma: no cover - mlflow is a core dependency
        raise ImportError("MLflowSink (kernelswarm.experiments.sinks.mlflow_sink) needs mlflow: "
                          "pip install 'mlflow>=2.10'") from exc
    return MlflowClient(tracking_uri=tracking_uri)


def sqlite_path(tracking_uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI, or None for any other store."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    # sqlite:///relative/path and sqlite:////absolute/path, optionally followed by ?options.
    path = tracking_uri[len("sqlite:///"):].split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None


def absolute_uri(tracking_uri: str) -> str:
    path = sqlite_path(tracking_uri)
    if path is None or path.is_absolute():
        return tracking_uri
    query = tracking_uri.partition("?")[2]
    return f"sqlite:///{path.resolve()}" + (f"?{query}" if query else "")


def param_key(key: str) -> str:
    """``key`` made acceptable to MLflow: allowed characters only, no path tricks, not too long."""
    name = re.sub(r"[^/\w.\- ]", "_", key)
    if not name or posixpath.normpath(name) != name:  # e.g. "a//b", "/a", "a/": MLflow refuses
        name = name.replace("/", "_") or "_"
    return name[:KEY_LIMIT]


def param_value(value: Any) -> str:
    """A param's text: strings as they are, anything else as JSON, cut to MLflow's limit."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if len(text) > PARAM_VALUE_LIMIT:
        marker = "...[truncated]"
        text = text[:PARAM_VALUE_LIMIT - len(marker)] + marker
    return text
