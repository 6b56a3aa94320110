"""Everything Ray: connecting, the tracker actor, evaluation workers, lineage runners, the
worker pool of a knob study, and the search driver's ports over actor handles."""

from .connect import ClusterInfo, connect, disconnect
from .eval_worker import EvalDispatcher, EvalWorker
from .lineage_runner import LineageResult, LineageRunner
from .ports import ActorTracker, DispatchedEvaluator
from .study import Finished, TrialPool
from .swarm import SEED_LINEAGE, Swarm, SwarmResult, SwarmSpec
from .tracker_actor import TrackerActor

__all__ = [
    "SEED_LINEAGE", "ActorTracker", "ClusterInfo", "DispatchedEvaluator", "EvalDispatcher",
    "EvalWorker", "Finished", "LineageResult", "LineageRunner", "Swarm", "SwarmResult",
    "SwarmSpec", "TrackerActor", "TrialPool", "connect", "disconnect",
]
