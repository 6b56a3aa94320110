"""``KnobStudy`` and ``KnobTuner``: Optuna ask/tell where every knob setting is evaluated once,
across sessions and drivers."""

from __future__ import annotations

import optuna
import pytest

from kernelswarm.search import Evaluation, KnobTuner, ShapeResult, Status, journal_storage
from kernelswarm.search.tuning import (
    FAILED,
    INTERRUPTED,
    KnobStudy,
    StudyMismatch,
    kernel_fingerprint,
)

SPACE = {"BLOCK": (64, 128, 256), "VEC": (1, 2)}
FINGERPRINT = kernel_fingerprint("cuda", "// kernel", SPACE)


def _ok(params: dict, speedup: float | None = None) -> Evaluation:
    speedup = speedup if speedup is not None else params["BLOCK"] / 64 + params["VEC"] / 10
    shape = ShapeResult("n=1024", correct=True, time_us=10.0 / speedup, start_time_us=10.0,
                        speedup_vs_start=speedup, speedup_vs_eager=speedup / 2)
    return Evaluation(f"id-{params}", Status.OK, shapes=(shape,))


def _study(storage=None, name: str = "s", fingerprint: str = FINGERPRINT,
           first: dict | None = None) -> KnobStudy:
    storage = storage or optuna.storages.InMemoryStorage()
    return KnobStudy.open(storage, name, SPACE, fingerprint, seed=1, first=first)


def _key(params: dict) -> tuple:
    return tuple(sorted(params.items()))


def test_every_setting_is_handed_out_once_then_the_study_is_exhausted():
    study = _study(first={"BLOCK": 64, "VEC": 1})
    seen = []
    while (proposal := study.ask()) is not None:
        seen.append(_key(proposal.params))
        study.tell(proposal.number, _ok(proposal.params))
    assert seen[0] == _key({"BLOCK": 64, "VEC": 1})  # the kernel as given comes first
    assert sorted(seen) == sorted(set(seen)) and len(seen) == 6
    assert study.evaluated == 6 and "every knob setting" in study.stop_reason
    # repeats the sampler proposed were told the known value and marked, never handed out
    repeats = [t for t in study.study.trials if "duplicate_of" in t.user_attrs]
    originals = {t.number: t for t in study.study.trials if "duplicate_of" not in t.user_attrs}
    for trial in repeats:
        assert trial.params == originals[trial.user_attrs["duplicate_of"]].params
        assert trial.value == originals[trial.user_attrs["duplicate_of"]].value
    assert study.best(1)[0].params == {"BLOCK": 256, "VEC": 2}
    number, params, value = study.leader()
    assert params == study.best(1)[0].params and value == study.best(1)[0].value
    assert number == study.best(1)[0].number


def test_a_failed_setting_is_a_fail_trial_with_its_status_and_message():
    study = _study()
    proposal = study.ask()
    verdict = study.tell(proposal.number, Evaluation("x", Status.INCORRECT, "wrong on n=1024"))
    trial = study.study.trials[proposal.number]
    assert verdict.value is None and trial.state == optuna.trial.TrialState.FAIL
    assert trial.user_attrs["status"] == "INCORRECT"
    assert trial.user_attrs["message"] == "wrong on n=1024"
    assert study.best(1) == []


def test_an_evaluated_trial_carries_its_per_shape_times():
    study = _study()
    proposal = study.ask()
    study.tell(proposal.number, _ok(proposal.params, speedup=2.0))
    attrs = study.study.trials[proposal.number].user_attrs
    assert attrs["time_us"] == {"n=1024": 5.0} and attrs["start_time_us"] == {"n=1024": 10.0}
    assert attrs["speedup_vs_start"] == {"n=1024": 2.0} and attrs["speedup_vs_eager"] == 1.0
    assert attrs["status"] == "OK" and attrs["candidate_id"].startswith("id-")


def test_a_setting_proposed_while_in_flight_waits_for_that_verdict():
    study = _study()
    first = study.ask()
    study.study.enqueue_trial(first.params)  # the sampler proposes the in-flight setting again
    second = study.ask()
    assert second is not None and second.params != first.params
    study.tell(first.number, _ok(first.params, speedup=1.5))
    repeat = [t for t in study.study.trials if t.user_attrs.get("duplicate_of") == first.number]
    assert len(repeat) == 1 and repeat[0].value == 1.5


def test_a_later_session_continues_the_study_without_re_proposing(tmp_path):
    storage = journal_storage(tmp_path / "optuna.journal")
    first = _study(storage)
    done = []
    for _ in range(4):
        proposal = first.ask()
        first.tell(proposal.number, _ok(proposal.params))
        done.append(_key(proposal.params))
    later = _study(storage)
    assert later.evaluated == 4
    rest = []
    while (proposal := later.ask()) is not None:
        rest.append(_key(proposal.params))
        later.tell(proposal.number, _ok(proposal.params))
    assert len(rest) == 2 and not set(rest) & set(done)


def test_a_study_of_another_kernel_is_refused(tmp_path):
    storage = journal_storage(tmp_path / "optuna.journal")
    _study(storage)
    with pytest.raises(StudyMismatch, match="another kernel or knob space"):
        _study(storage, fingerprint=kernel_fingerprint("cuda", "// other", SPACE))
    foreign = optuna.create_study(storage=storage, study_name="theirs", direction="maximize")
    foreign.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    with pytest.raises(StudyMismatch, match="not made by kernelswarm"):
        _study(storage, name="theirs")


def test_abandoned_and_stale_trials_are_no_verdict(tmp_path):
    storage = journal_storage(tmp_path / "optuna.journal")
    study = _study(storage)
    abandoned, stale = study.ask(), study.ask()
    study.abandon(abandoned.number)
    trial = study.study.trials[abandoned.number]
    assert trial.state == optuna.trial.TrialState.FAIL
    assert trial.user_attrs["status"] == INTERRUPTED
    later = _study(storage)  # the first session "crashed" with ``stale`` still running
    assert later.fail_stale() == 1 and later.evaluated == 0
    assert later.study.trials[stale.number].state == optuna.trial.TrialState.FAIL
    asked = set()
    while (proposal := later.ask()) is not None:
        asked.add(_key(proposal.params))
        later.tell(proposal.number, _ok(proposal.params))
    assert {_key(abandoned.params), _key(stale.params)} <= asked  # both evaluated after all


def test_two_drivers_on_one_study_take_in_each_others_verdicts(tmp_path):
    storage = journal_storage(tmp_path / "optuna.journal")
    one, other = _study(storage), _study(storage)  # both open before any verdict
    mine = []
    for _ in range(3):
        proposal = one.ask()
        one.tell(proposal.number, _ok(proposal.params))
        mine.append(_key(proposal.params))
    theirs = []
    while (proposal := other.ask()) is not None:
        theirs.append(_key(proposal.params))
        other.tell(proposal.number, _ok(proposal.params))
    assert len(theirs) == 3 and not set(theirs) & set(mine)


def test_a_lineage_tuner_keeps_one_study_per_key_in_one_storage(tmp_path):
    storage = journal_storage(tmp_path / "optuna.journal")
    tuner = KnobTuner(seed=0, storage=storage, prefix="lineage0-")
    number, knobs = tuner.ask("a", SPACE)
    tuner.tell("a", number, None)  # the candidate failed: a FAIL that counts as tried
    other, _ = tuner.ask("b", {"UNROLL": (1, 2)})
    tuner.tell("b", other, 1.5)
    names = sorted(s.study_name for s in optuna.get_all_study_summaries(storage))
    assert names == ["lineage0-a", "lineage0-b"]
    failed = optuna.load_study(study_name="lineage0-a", storage=storage).trials[number]
    assert failed.state == optuna.trial.TrialState.FAIL and failed.user_attrs["status"] == FAILED
    # a resumed lineage's tuner knows the failed setting and never hands it out again
    later = KnobTuner(seed=0, storage=storage, prefix="lineage0-")
    asked = []
    while (proposal := later.ask("a", SPACE)) is not None:
        asked.append(_key(proposal[1]))
        later.tell("a", proposal[0], 1.0)
    assert len(asked) == 5 and _key(knobs) not in asked
    tuner.tell("a", 999, 2.0)  # a trial it never handed out is ignored
    assert later.trials("never asked") == 0
