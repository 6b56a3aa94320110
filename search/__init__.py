"""Pure model and algorithms of kernelswarm: no Ray, no network, no GPU."""

from .archive import Archive, Member, source_family
from .archive_languages import LanguageScales, start_scale
from .budget import Budget, BudgetExpired, Spent
from .candidate import STRUCTURE_MARKER, Candidate, Origin, candidate_id
from .confirm import CHECK_SEEDS, Confirmation, Confirmed, SecretSeeds, choose, median_evaluation
from .dispatch import (
    DispatchTable,
    knobs_of_shape,
    read_dispatch_table,
    read_shape_knobs,
    route_symbol,
    shape_knob_line,
)
from .driver import Clock, Driver, Judged, StopSignal, SystemClock, TrackerPort, Via
from .evaluation import (
    Z95,
    Evaluation,
    ShapeResult,
    StartingKernelFailed,
    Status,
    median_rel_se,
    speedup_ci,
)
from .evaluator import Compiler, CompileResult, Evaluator
from .executor import LocalExecutor
from .language_spec import (
    ARGUMENT_KINDS,
    LANGUAGES,
    SPECS,
    SUFFIX_LANGUAGES,
    Arguments,
    Dispatch,
    KnobStyle,
    LanguageSpec,
    Syntax,
    UnknownLanguage,
    language_spec,
    source_suffix,
    spec_for_suffix,
)
from .lineage import NOT_NOVEL, Lineage, study_key
from .measured import (
    NCU_COUNTERS,
    BaselineSource,
    EvaluationCost,
    KernelResources,
    MachineFigures,
    Profile,
    kernel_resources,
)
from .population import TOPOLOGIES, Migration, Population
from .roles import (
    ADOPT,
    BOUNDS,
    COMPUTE,
    CORRECTNESS,
    MEMORY,
    REPAIR,
    REWRITE,
    STAGES,
    STOP,
    TUNE,
    Analyst,
    Attempt,
    Check,
    Coder,
    Facts,
    Feedback,
    LineageView,
    Plan,
    Planner,
    Roles,
    Tester,
    Usage,
)
from .screening import SCREEN_MARGIN, Screen, screened_speedup
from .sink import Record, RunInfo, RunSummary, Sink
from .stored_form import stored_detail, typed_detail
from .strategies import STRATEGIES, Option, Rejection, Strategy, make_strategy, strategy_options
from .task import Shape, StartingKernel, Task, TaskError, Tolerance, load_task
from .tracker import Tracker
from .tuning import KnobStudy, KnobTuner, StudyMismatch, journal_storage, kernel_fingerprint
from .withheld import Withheld

__all__ = [
    "ADOPT", "BOUNDS", "COMPUTE", "CORRECTNESS", "LANGUAGES", "MEMORY", "REPAIR", "REWRITE", "STAGES",
    "STOP", "TOPOLOGIES", "TUNE", "Check", "Migration", "Spent", "Tester", "Usage",
    "source_family", "Analyst", "Archive", "Attempt", "Budget", "BudgetExpired",
    "Candidate", "Coder", "CompileResult", "Compiler", "Evaluation", "Evaluator", "Facts", "Feedback",
    "KnobTuner", "Lineage", "LineageView", "LocalExecutor", "Origin", "Plan", "Planner", "Record",
    "Roles", "RunInfo", "RunSummary", "Shape", "ShapeResult", "Sink", "StartingKernelFailed", "StartingKernel", "Status",
    "Task", "TaskError", "Tolerance", "Tracker", "candidate_id", "study_key", "load_task",
    "journal_storage", "Clock", "Driver", "Judged", "KnobStudy", "StopSignal", "SystemClock",
    "TrackerPort", "Via", "Withheld",
    "SPECS", "SUFFIX_LANGUAGES", "Arguments", "KnobStyle", "LanguageSpec", "Syntax", "UnknownLanguage",
    "language_spec", "source_suffix", "spec_for_suffix", "Confirmation", "Confirmed", "choose",
    "median_evaluation", "SecretSeeds", "CHECK_SEEDS", "LanguageScales", "start_scale", "Population", "STRATEGIES", "Rejection",
    "Strategy", "make_strategy",
    "Member", "STRUCTURE_MARKER", "DispatchTable", "knobs_of_shape", "read_dispatch_table",
    "read_shape_knobs", "route_symbol", "shape_knob_line", "Z95", "median_rel_se", "speedup_ci",
    "ARGUMENT_KINDS", "Dispatch", "NOT_NOVEL", "NCU_COUNTERS", "BaselineSource", "EvaluationCost",
    "KernelResources", "MachineFigures", "Profile", "kernel_resources", "stored_detail",
    "typed_detail", "Option", "strategy_options", "StudyMismatch", "kernel_fingerprint",
    "SCREEN_MARGIN", "Screen", "screened_speedup",
]
