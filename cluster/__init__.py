"""Everything Ray: connecting, the tracker actor, the pool of evaluation workers (shared by the
cells of a sweep), lineage actors, the trial pool of a knob study, and the search driver's
ports over actor handles; what the evaluation workers did (``workers.json``)."""

from .activity import ACTIVITY_FILE, activity_line, summarise_activity, write_activity
from .connect import ClusterInfo, connect, current_address, disconnect
from .eval_worker import EvalDispatcher, EvalWorker
from .fair_share import FairShare, Share
from .lineage_actor import LineageActor, LineageResult
from .pool import EvalPool, Lane
from .ports import ActorTracker, DispatchedEvaluator
from .study import Finished, TrialPool
from .swarm import SEED_LINEAGE, LanguageStart, Swarm, SwarmResult, SwarmSpec
from .tracker_actor import TrackerActor

__all__ = [
    "SEED_LINEAGE", "ActorTracker", "ClusterInfo", "DispatchedEvaluator", "EvalDispatcher",
    "EvalPool", "EvalWorker", "FairShare", "Finished", "Lane", "LanguageStart", "LineageActor",
    "LineageResult", "Share", "Swarm", "SwarmResult", "SwarmSpec", "TrackerActor", "TrialPool",
    "connect", "disconnect", "current_address", "ACTIVITY_FILE", "activity_line",
    "summarise_activity", "write_activity",
]
