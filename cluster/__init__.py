"""Everything Ray: connecting, the tracker actor, evaluation workers, lineage runners, the
worker pool of a knob study."""

from .connect import ClusterInfo, connect, disconnect
from .eval_worker import EvalDispatcher, EvalWorker
from .lineage_runner import LineageResult, LineageRunner
from .study import Finished, TrialPool
from .swarm import SEED_LINEAGE, Swarm, SwarmResult, SwarmSpec
from .tracker_actor import TrackerActor

__all__ = [
    "SEED_LINEAGE", "ClusterInfo", "EvalDispatcher", "EvalWorker", "Finished", "LineageResult",
    "LineageRunner", "Swarm", "SwarmResult", "SwarmSpec",
    "TrackerActor", "TrialPool", "connect", "disconnect",
]
