"""Everything Ray: connecting, the tracker actor, evaluation workers, lineage runners."""

from .connect import ClusterInfo, connect, disconnect
from .eval_worker import EvalDispatcher, EvalWorker
from .lineage_runner import LineageResult, LineageRunner
from .swarm import SEED_LINEAGE, Swarm, SwarmResult, SwarmSpec
from .tracker_actor import TrackerActor

__all__ = [
    "SEED_LINEAGE", "ClusterInfo", "EvalDispatcher", "EvalWorker", "LineageResult",
    "LineageRunner", "Swarm", "SwarmResult", "SwarmSpec",
    "TrackerActor", "connect", "disconnect",
]
