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
``best/<id>.<ext>``, ``summary.json`` and ``report/`` (outputs.py, report.py).
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from kernelswarm.cluster import (
    Finished,
    TrialPool,
    activity_line,
    connect,
    disconnect,
    summarise_activity,
)
from kernelswarm.evaluators import SandboxEvaluator, TimingSettings
from kernelswarm.search import (
    Candidate,
    KnobStudy,
    Origin,
    RunInfo,
    RunSummary,
    Sink,
    Tracker,
    Via,
    journal_storage,
    kernel_fingerprint,
    load_task,
)

from ..config import Config
from ..run.execute import evaluator_settings
from ..run.execute import worker_pool as evaluation_workers
from ..run.log import LOG_NAME, stderr_to
from ..run.resume import restore_records
from ..sinks import ParquetSink, TrialMLflowSink
from ..sinks.mlflow_store import absolute_uri as absolute_sqlite_uri
from ..views.progress import LiveView
from ..views.tune_view import study_view
from .folder import JOURNAL, TUNE_FILE, kernel_file_name
from .outputs import TuneOutcome, print_closing, write_json, write_report, write_summary
from .study import TuneError, open_study

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
        self.device = ""  # where the trials were timed, as the evaluations name it

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
        self.device = self.device or done.evaluation.device
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
    write_json(run_dir / "config.json", config.model_dump(mode="json"))
    TimingSettings.of(evaluator_settings(config)).write(run_dir)  # what eval of its files uses
    write_json(run_dir / TUNE_FILE, spec.document())
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
    outcome = write_summary(outcome, {
        "task": task.name, "language": base.language,
        "device": session.device or config.evaluator.device, "statuses": session.statuses,
        "activity": session.activity})
    outcome = write_report(outcome, config.tracking.mlflow, console)
    print_closing(console, outcome)
    if session.activity:
        console.print(activity_line(summarise_activity(session.activity)), highlight=False, markup=False,
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
