"""``kernelswarm tune``'s driver: a knob study of one kernel, its trials evaluated in parallel.

The driver asks Optuna (``search.KnobStudy``) for knob settings and keeps up to two trials per
evaluation worker in flight on the cluster (``TrialPool``: each trial judged by the search's
``Driver`` on a driver thread, timed on the workers, one per GPU). Each new verdict is recorded
by the ``Tracker`` (Parquet before anything else, MLflow from its background thread) and then
told to the study; a setting recorded before (a resumed run) is told without a new record.
Ctrl-C stops asking and waits for the trials in flight; a second Ctrl-C abandons them (told as
INTERRUPTED).

Run folder: ``config.json``, ``tune.json`` (what is tuned and where the study lives; what
``--resume`` reads), ``kernel.<ext>`` (the tuned source), ``optuna.journal`` (the default
storage), ``evaluations/`` and ``candidates/`` (Parquet, as for ``kernelswarm run``),
``best/<id>.<ext>`` and ``summary.json``.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from kernelswarm.cluster import Finished, TrialPool, connect, disconnect
from kernelswarm.cluster.activity import activity_line, summarise, write_activity
from kernelswarm.evaluators import SandboxEvaluator
from kernelswarm.evaluators.timing_protocol import TimingSettings
from kernelswarm.search import (
    Candidate,
    Origin,
    RunInfo,
    RunSummary,
    Sink,
    Tracker,
    Via,
    journal_storage,
    load_task,
    source_suffix,
)
from kernelswarm.search.tuning import KnobStudy, kernel_fingerprint

from ..config import Config
from ..run.compiler_messages import naming_in
from ..run.log import LOG_NAME, stderr_to
from ..run.resume import restore_records
from ..run.runner import evaluator_settings, write_best_kernel
from ..run.runner import worker_pool as evaluation_workers
from ..sinks import ParquetSink, TrialMLflowSink
from ..sinks.mlflow_store import absolute_uri as absolute_sqlite_uri
from ..views.progress import LiveView
from ..views.speedups import finite, kernel_figures
from ..views.tune_view import best_table, study_view, trial_outcome
from .study import TuneError, open_study

TUNE_FILE = "tune.json"
JOURNAL = "optuna.journal"
STUDY_LINEAGE = 0  # every trial is recorded under this lineage; its step is the trial number


@dataclass(frozen=True)
class TuneSpec:
    """What is tuned and where the study lives; saved as ``tune.json`` in the run folder."""

    kernel_file: str  # where the source came from, for people
    source: str
    knob_space: dict[str, tuple[Any, ...]]
    study_name: str
    storage: str | None  # an RDB URL or a journal file; None: the run folder's optuna.journal
    trials: int  # new evaluations this session

    def document(self) -> dict[str, Any]:
        doc = asdict(self)
        doc.pop("source")  # kept beside it as kernel.<ext>
        doc["knob_space"] = {k: list(v) for k, v in self.knob_space.items()}
        return doc

    @classmethod
    def read(cls, run_dir: Path, language: str, trials: int | None) -> TuneSpec:
        path = run_dir / TUNE_FILE
        try:
            doc = json.loads(path.read_text())
            source = (run_dir / kernel_file_name(language)).read_text()
        except FileNotFoundError as exc:
            raise TuneError(f"{run_dir}: not a kernelswarm tune run folder ({exc.filename} is "
                            f"missing)") from None
        space = {k: tuple(v) for k, v in doc["knob_space"].items()}
        return cls(doc["kernel_file"], source, space, doc["study_name"], doc["storage"],
                   doc["trials"] if trials is None else trials)


def kernel_file_name(language: str) -> str:
    return f"kernel{source_suffix(language)}"


def resolve_storage(storage: str | None, run_dir: Path) -> tuple[Any, str]:
    """The Optuna storage and how to name it to a person (a URL, or a journal file's path)."""
    if storage is None:
        path = run_dir / JOURNAL
        return journal_storage(path), str(path)
    if "://" in storage:
        url = absolute_sqlite_uri(storage)
        return url, url
    path = Path(storage).expanduser().resolve()
    return journal_storage(path), str(path)


def dashboard_command(storage_text: str) -> str:
    """How to open the study in optuna-dashboard (it takes a journal file's path or a URL); it
    is no dependency of kernelswarm, so the hint says how to get it."""
    return f"optuna-dashboard {storage_text}  (pip install optuna-dashboard)"


@dataclass(frozen=True)
class TuneOutcome:
    run_dir: Path
    study: KnobStudy
    storage: str
    stop_reason: str
    evaluated: int  # new evaluations this session
    summary: RunSummary
    locations: list[str]
    sink_errors: list[str]
    best_path: Path | None
    utilisation: dict[str, float] = field(default_factory=dict)
    kernel_file: str = ""  # the tuned kernel's file, named in its compiler errors


def _sinks(config: Config, study_name: str, storage: str) -> list[Sink]:
    sinks: list[Sink] = [ParquetSink()]
    if config.tracking.mlflow:
        sinks.append(TrialMLflowSink(config.tracking.mlflow_uri,
                                     config.tracking.experiment or config.run.name,
                                     tags={"study": study_name, "storage": storage}))
    return sinks


class _Session:
    """One session of a study: fills the pool, records and tells verdicts as they come."""

    def __init__(self, study: KnobStudy, pool: TrialPool, tracker: Tracker, base: Candidate,
                 trials: int) -> None:
        self.study, self.pool, self.tracker, self.base = study, pool, tracker, base
        self.trials = trials
        self.evaluated = 0
        self.statuses: Counter[str] = Counter()
        self.recent: deque[tuple[int, dict[str, Any], str, float]] = deque(maxlen=8)
        self.reason = ""
        self.activity: dict[str, Any] | None = None  # what the workers did (workers.json)

    def _candidate(self, number: int, params: dict[str, Any]) -> Candidate:
        rationale = f"optuna trial {number} of study {self.study.study.study_name}"
        return Candidate.create(
            language=self.base.language, source=self.base.source, entry=self.base.entry,
            knobs=params, knob_space=self.base.space, lineage=STUDY_LINEAGE,
            origin=Origin(role="tuner", move="tune", rationale=rationale),
            spec=self.base.spec_dict)

    def fill(self) -> None:
        """Ask for settings until every slot is busy or the session's trials are handed out."""
        while (not self.reason and self.pool.has_room
               and self.evaluated + self.pool.in_flight < self.trials):
            proposal = self.study.ask()
            if proposal is None:
                self.reason = self.study.stop_reason
                return
            self.pool.submit(proposal.number, self._candidate(proposal.number, proposal.params))

    def finish(self, done: Finished) -> None:
        number = int(done.key)
        if done.judged.via is Via.RECORDED:  # in Parquet, unknown to the study: no new record
            self.study.tell(number, done.evaluation)
            return
        self.tracker.record(STUDY_LINEAGE, number, done.candidate, done.evaluation)
        self.study.tell(number, done.evaluation)  # after Parquet holds it
        self.evaluated += 1
        self.statuses[done.evaluation.status.value] += 1
        self.recent.append((number, done.candidate.knob_values, done.evaluation.status.value,
                            done.evaluation.speedup))

    def stats(self) -> dict[str, Any]:
        return {"evaluated": self.evaluated, "trials": self.trials,
                "in_flight": self.pool.in_flight, "statuses": dict(self.statuses),
                "known": self.study.evaluated, "recent": list(self.recent),
                "best": self.study.leader(),
                "utilisation": self.pool.utilisation()}

    def run(self, view: LiveView, console: Console) -> str:
        stopping = ""
        while True:
            try:
                if not stopping:
                    self.fill()
                if self.pool.in_flight == 0:
                    break
                for done in self.pool.wait(timeout=0.5):
                    self.finish(done)
                view.update(self.stats())
            except KeyboardInterrupt:
                if stopping:
                    console.print("[yellow]interrupted again: abandoning the trials in flight[/]")
                    return "interrupted by the user; trials in flight abandoned"
                stopping = "interrupted by the user"
                console.print("[yellow]interrupted: waiting for the trials in flight (Ctrl-C "
                              "again abandons them); recorded results are kept[/]")
        return stopping or self.reason or f"{self.evaluated} trials evaluated"


def _new_run_dir(config: Config) -> Path:
    run_id = f"{config.run.name}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
    run_dir = (config.run.out_dir / run_id).resolve()
    run_dir.mkdir(parents=True)
    return run_dir


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str))
    tmp.replace(path)


def tune(config: Config, spec: TuneSpec, console: Console | None = None,
         resume: Path | None = None) -> TuneOutcome:
    """Run ``spec.trials`` new trials of the study ``spec`` names; a new run folder, or with
    ``resume`` the run folder of an earlier session, whose records are not evaluated again."""
    console = console or Console()
    task = load_task(config.task_path(), config.evaluator.device)
    kernel = task.kernel(config.task.language)
    base = Candidate.create(language=config.task.language, source=spec.source,
                            entry=kernel.entry, knob_space=spec.knob_space, lineage=STUDY_LINEAGE,
                            origin=Origin(role="tuner", move="tune"), spec=kernel.spec)
    make_evaluator = partial(SandboxEvaluator, task.path, base.language,
                             evaluator_settings(config))
    try:  # a language the device cannot run, a bad setting: said now, not from a thread later
        make_evaluator().close()
    except ValueError as exc:
        raise TuneError(str(exc)) from None
    run_dir = resume.resolve() if resume is not None else _new_run_dir(config)
    history = restore_records(run_dir, task) if resume is not None else []
    storage, storage_text = resolve_storage(spec.storage, run_dir)
    if spec.storage is not None:  # kept absolute, so --resume works from any folder
        spec = replace(spec, storage=storage_text)
    _write_json(run_dir / "config.json", config.model_dump(mode="json"))
    TimingSettings.of(evaluator_settings(config)).write(run_dir)  # what eval of its files uses
    _write_json(run_dir / TUNE_FILE, spec.document())
    (run_dir / kernel_file_name(base.language)).write_text(spec.source)
    study = _open_study(config, spec, base, storage, run_dir, resume is not None)
    if resume is not None:
        study.fail_stale()
        console.print(f"resuming {run_dir.name}: {len(history)} evaluations recorded, "
                      f"{study.evaluated} knob settings known to the study", markup=False)
    info = RunInfo(run_id=run_dir.name, name=config.run.name, run_dir=run_dir, task=task.name,
                   language=base.language, lineages=1,
                   params={**config.flat(), "tune.study": spec.study_name,
                           "tune.storage": storage_text, "tune.trials": spec.trials,
                           "tune.kernel": spec.kernel_file,
                           "tune.knob_space": spec.document()["knob_space"]})
    with stderr_to(run_dir / LOG_NAME):  # Ray's and MLflow's warnings: the log, as in a run
        reason, summary, utilisation, session, tracker = _search(
            config, spec, info, history, study, base, make_evaluator, storage_text, run_dir,
            console)
    outcome = TuneOutcome(run_dir, study, storage_text, reason, session.evaluated, summary,
                          tracker.locations(), list(tracker.sink_errors), None, utilisation,
                          spec.kernel_file)
    outcome = _write_outputs(outcome, session)
    _print_closing(console, outcome)
    if session.activity:
        console.print(activity_line(summarise(session.activity)), highlight=False, markup=False,
                      soft_wrap=True)
    return outcome


def _search(config: Config, spec: TuneSpec, info: RunInfo, history: list, study: KnobStudy,
            base: Candidate, make_evaluator: Callable[[], Any], storage_text: str,
            run_dir: Path, console: Console
            ) -> tuple[str, RunSummary, dict[str, float], _Session, Tracker]:
    """The study's trials on a Ray cluster: (stop reason, summary, utilisation, session,
    tracker)."""
    task = info.task
    cluster = connect(config.cluster.address, config.cluster.num_cpus)
    try:
        workers, resources = evaluation_workers(config, cluster.gpus)
        console.print("[bold]kernelswarm tune[/] " + escape(
            f"{task} ({base.language}) · {_space_text(spec.knob_space)} · {spec.trials} "
            f"trials · {workers} evaluation worker(s) · Ray {cluster.address} "
            f"({cluster.cpus:g} CPUs, {cluster.gpus:g} GPUs)\nrun folder: {run_dir}\nstudy: "
            f"{spec.study_name} in {storage_text}"), highlight=False,
                      soft_wrap=True)
        tracker = Tracker(info, _sinks(config, spec.study_name, storage_text), history=history)
        try:
            pool = TrialPool(make_evaluator, workers, resources, tracker)
        except BaseException:
            tracker.close("the tune failed to start")
            raise
        session = _Session(study, pool, tracker, base, spec.trials)
        reason, summary, utilisation = _drive(session, console)
    finally:
        disconnect(cluster)
    return reason, summary, utilisation, session, tracker


def _open_study(config: Config, spec: TuneSpec, base: Candidate, storage: Any, run_dir: Path,
                resumed: bool) -> KnobStudy:
    fingerprint = kernel_fingerprint(base.language, spec.source, spec.knob_space)
    try:
        return open_study(storage, spec.study_name, spec.knob_space, fingerprint,
                          seed=config.run.seed, first=base.knob_values)
    except TuneError:
        if not resumed:  # nothing ran: leave no empty run folder behind
            shutil.rmtree(run_dir, ignore_errors=True)
        raise


def _drive(session: _Session, console: Console) -> tuple[str, RunSummary, dict[str, float]]:
    """Run the session; whatever happens, abandon what is still open and close the sinks and
    the pool. The stop reason, the tracker's summary and the workers' utilisation."""
    reason = "the tune failed"
    utilisation: dict[str, float] = {}
    try:
        with study_view(console) as view:
            reason = session.run(view, console)
        utilisation = session.pool.utilisation()
        session.activity = session.pool.activity()  # None if the pool did not answer
    finally:
        for number in session.study.open_trials():
            session.study.abandon(number)
        summary = session.tracker.close(reason)
        session.pool.close()
    return reason, summary, utilisation


def _space_text(space: dict[str, tuple[Any, ...]]) -> str:
    return ", ".join(f"{k} in {{{', '.join(map(str, v))}}}" for k, v in sorted(space.items()))


def _write_outputs(outcome: TuneOutcome, session: _Session) -> TuneOutcome:
    """``best/<id>.<ext>`` and ``summary.json``; the outcome with the best kernel's path."""
    summary, study, run_dir = outcome.summary, outcome.study, outcome.run_dir
    best_path = None
    if summary.best is not None:
        best_path = write_best_kernel(run_dir, summary.best[0])
    top = [{"trial": t.number, "knobs": t.params, "speedup_vs_start": t.value,
            "speedup_vs_eager": t.user_attrs.get("speedup_vs_eager"),
            "candidate_id": t.user_attrs.get("candidate_id")} for t in study.best(10)]
    _write_json(run_dir / "summary.json", {
        "stop_reason": outcome.stop_reason, "study": study.study.study_name,
        "storage": outcome.storage, "dashboard": dashboard_command(outcome.storage),
        "evaluated_this_session": outcome.evaluated,
        "statuses_this_session": dict(session.statuses),
        "settings_evaluated": study.evaluated, "records": summary.records,
        "wall_s": summary.wall_s,
        "timing": TimingSettings.read(run_dir).as_dict(),
        "best": None if summary.best is None else finite({
            "candidate_id": summary.best[0].id, "knobs": summary.best[0].knob_values,
            **kernel_figures(summary.best[1]), "file": str(best_path)}),
        "top_trials": top, "sink_errors": outcome.sink_errors,
        "utilisation": outcome.utilisation,
        # busy by minute, evaluations a minute, calibrations, GPUs (workers.json: every trial's
        # worker and times; cluster/activity.py)
        "workers": write_activity(run_dir, session.activity) if session.activity else None})
    return replace(outcome, best_path=best_path)


def _print_closing(console: Console, outcome: TuneOutcome) -> None:
    best = outcome.study.best(5)
    listed = {t.number for t in best}
    others = [t for t in outcome.study.study.get_trials(deepcopy=False)
              if t.number not in listed and t.state.is_finished()
              and (t.state.name == "FAIL" or "duplicate_of" in t.user_attrs)]
    console.print(best_table(best, outcome.study.study.study_name, others))
    failed = next((t for t in others if t.user_attrs.get("message")), None)
    if not best and failed is not None:  # what a user needs first: why nothing ran
        message = failed.user_attrs["message"]
        if outcome.kernel_file:
            message = naming_in(message, outcome.kernel_file)
        console.print(f"[red]trial {failed.number} {trial_outcome(failed)}:[/] "
                      f"{escape(message)}", highlight=False)
    for error in outcome.sink_errors:
        console.print(f"[red]{escape(error)}[/]", highlight=False)
    # Plain lines, never wrapped by the console: a terminal may wrap a path, never cut it.
    lines = [f"stopped: {outcome.stop_reason} ({outcome.evaluated} evaluated this session, "
             f"{outcome.study.evaluated} knob settings evaluated in the study)",
             f"study: {outcome.study.study.study_name} in {outcome.storage}",
             f"browse it: {dashboard_command(outcome.storage)}",
             *(f"results: {location}" for location in outcome.locations)]
    if outcome.best_path:
        lines.append(f"best kernel: {outcome.best_path} (its knob values at its top)")
    lines.append(f"continue: kernelswarm tune --resume {outcome.run_dir} --trials N")
    for line in lines:
        console.print(line, highlight=False, markup=False, soft_wrap=True)
