"""A Ray cluster of several nodes on this one machine (``ray.cluster_utils``), for measuring and
testing what crosses nodes: each node is its own raylet and object store, as on a real cluster.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType

import ray
from ray.cluster_utils import Cluster


@dataclass(frozen=True)
class NodeSpec:
    """One node: its CPUs and custom resources (e.g. ``{"sim_gpu": 4}``)."""

    num_cpus: int = 1
    resources: Mapping[str, float] = field(default_factory=dict)


class LocalCluster:
    """A head node plus ``nodes``, joined by this process as its driver while in the ``with``.

    The head runs the driver and whatever is placed on it; the other nodes carry the custom
    resources actors ask for, so actors that need them land on those nodes.
    """

    def __init__(self, nodes: Sequence[NodeSpec], head: NodeSpec | None = None) -> None:
        if ray.is_initialized():
            raise RuntimeError("LocalCluster starts its own Ray cluster: this process is already "
                               "connected to one (call ray.shutdown() first)")
        self.nodes = list(nodes)
        self.head = head or NodeSpec(num_cpus=1)
        self._cluster: Cluster | None = None

    @property
    def address(self) -> str:
        if self._cluster is None:
            raise RuntimeError("LocalCluster used outside its 'with' block")
        return self._cluster.address

    def __enter__(self) -> LocalCluster:
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": self.head.num_cpus, "resources": dict(self.head.resources)})
        self._cluster = cluster
        try:
            for node in self.nodes:
                cluster.add_node(num_cpus=node.num_cpus, resources=dict(node.resources))
            cluster.wait_for_nodes()
            ray.init(address=cluster.address, include_dashboard=False,
                     logging_level=logging.WARNING, log_to_driver=True)
        except BaseException:
            cluster.shutdown()
            self._cluster = None
            raise
        return self

    def alive_nodes(self) -> int:
        return sum(1 for node in ray.nodes() if node.get("Alive"))

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        ray.shutdown()
        if self._cluster is not None:
            self._cluster.shutdown()
            self._cluster = None
