"""Connecting to Ray: a named cluster, the one ``RAY_ADDRESS`` names, or a local instance."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import ray


@dataclass(frozen=True)
class ClusterInfo:
    address: str
    cpus: float
    gpus: float
    nodes: int
    started_here: bool  # a local instance this process started (and shuts down)


def connect(address: str | None = None, num_cpus: int | None = None) -> ClusterInfo:
    """Join the cluster at ``address`` (or ``RAY_ADDRESS``), else start a local instance.

    An instance already initialised in this process is reused.
    """
    started = False
    if not ray.is_initialized():
        address = address or os.environ.get("RAY_ADDRESS") or None
        kwargs = dict(include_dashboard=False, logging_level=logging.WARNING,
                      log_to_driver=True, configure_logging=True)
        if address:
            ray.init(address=address, **kwargs)
        else:
            # "local" starts a new instance; with no address Ray would join whatever cluster
            # /tmp/ray/ray_current_cluster names, even a dead one. Ray starts its workers at
            # niceness 15, below its own processes; on this machine the evaluation worker and
            # its sandboxed runners time kernels, and at 15 any other process (the driver,
            # Ray's agents, another user's) takes the CPU from a timed call. They run at the
            # normal priority here; the actors that are not the bottleneck lower their own
            # (priority.py).
            ray.init(address="local", num_cpus=num_cpus,
                     _system_config={"worker_niceness": 0}, **kwargs)
            started = True
    resources = ray.cluster_resources()
    nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
    return ClusterInfo(
        address=ray.get_runtime_context().gcs_address, cpus=resources.get("CPU", 0.0),
        gpus=resources.get("GPU", 0.0), nodes=nodes, started_here=started)


def disconnect(info: ClusterInfo) -> None:
    """Shut down a local instance this process started; leave a shared cluster alone."""
    if info.started_here and ray.is_initialized():
        ray.shutdown()


def current_address() -> str | None:
    """The address of the Ray instance this process is connected to; None when it is not."""
    return ray.get_runtime_context().gcs_address if ray.is_initialized() else None
