"""What candidate code can see: a scrubbed environment, in a process of its own."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelswarm.evaluators import SandboxEvaluator
from kernelswarm.evaluators.environment import is_secret_name, scrubbed_environment
from kernelswarm.search import Status
from tests.conftest import SILU_TASK
from tests.evaluators.kernel_library import quick_settings


@pytest.fixture(scope="module")
def evaluator_started_with_secrets(compile_cache: Path, start) -> Iterator[SandboxEvaluator]:
    """An evaluator whose runners are all started while the parent holds an API key."""
    ev = SandboxEvaluator(SILU_TASK, "cpp", quick_settings(compile_cache, memory_limit_mb=4096))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
        patch.setenv("KS_TEST_VISIBLE", "1")
        assert ev.evaluate(start).ok  # calibrates and starts the first spare runner
        yield ev
    ev.close()


def test_a_kernel_that_misbehaves_when_it_sees_an_api_key_sees_none(
        evaluator_started_with_secrets, variant):
    reads = variant("reads_env", KS_ENV_VAR=("OPENAI_API_KEY", "KS_TEST_VISIBLE"))
    evaluation = evaluator_started_with_secrets.evaluate(reads)
    assert evaluation.status is Status.OK, evaluation.message


def test_the_same_kernel_does_misbehave_on_a_variable_that_is_passed_through(
        evaluator_started_with_secrets, variant):
    reads = variant("reads_env", KS_ENV_VAR=("OPENAI_API_KEY", "KS_TEST_VISIBLE"))
    control = reads.derive(knobs={"KS_ENV_VAR": "KS_TEST_VISIBLE"})
    evaluation = evaluator_started_with_secrets.evaluate(control)
    assert evaluation.status is Status.INCORRECT
    assert "got 42.0" in evaluation.message


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "AWS_REGION",
                                  "HF_HOME", "MLFLOW_TRACKING_URI", "GITHUB_TOKEN", "DB_PASSWORD",
                                  "my_secret", "https_proxy", "SSH_AUTH_SOCK"])
def test_credentials_and_service_variables_are_withheld(name):
    assert is_secret_name(name)
    assert name not in scrubbed_environment({name: "x", "PATH": "/bin"})


@pytest.mark.parametrize("name", ["PATH", "HOME", "PYTHONPATH", "LD_LIBRARY_PATH", "LANG",
                                  "CUDA_VISIBLE_DEVICES", "TMPDIR"])
def test_what_the_sandbox_needs_to_run_is_kept(name):
    assert scrubbed_environment({name: "x"}) == {name: "x"}


def runner_pid(group: int) -> int:
    """The runner's Python process in process group ``group``: the innermost one (under a
    namespace launcher the process the judge spawned, or the template forked, is the launcher,
    and the runner its child, pid 1 of the new PID namespace)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) != group:
                continue
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            parent = int((entry / "stat").read_bytes().rsplit(b")", 1)[1].split()[1])
        except OSError:
            continue
        if b"python" in argv[0].rsplit(b"/", 1)[-1] and any(
                a.startswith(b"kernelswarm.evaluators.runner") for a in argv):
            found[int(entry.name)] = parent
    inner = [pid for pid, parent in found.items() if parent in found]
    if inner or found:
        return (inner or list(found))[0]
    raise AssertionError(f"no runner process in group {group}")


def test_the_spare_runner_runs_in_its_own_session_and_scratch_folder(
        evaluator_started_with_secrets):
    evaluator_started_with_secrets._spares.wait()  # the spare is prepared in the background
    spare = evaluator_started_with_secrets._spares.spare
    assert spare is not None and spare.alive and spare.ready is not None
    assert os.getpgid(spare.process.pid) == spare.process.pid != os.getpgid(0)
    pid = runner_pid(spare.process.pid)
    assert Path(os.readlink(f"/proc/{pid}/cwd")) == spare.scratch


def test_the_runner_has_no_core_dumps_bounded_files_and_the_memory_limit(
        evaluator_started_with_secrets):
    evaluator_started_with_secrets._spares.wait()
    pid = runner_pid(evaluator_started_with_secrets._spares.spare.process.pid)
    limits = {line[:26].strip(): line[26:].split() for line in
              Path(f"/proc/{pid}/limits").read_text().splitlines()[1:]}
    assert limits["Max core file size"][:2] == ["0", "0"]
    assert limits["Max file size"][0] == str(64 * 1024 * 1024)
    assert limits["Max address space"][0] == str(4096 * 1024 * 1024)


def test_no_runner_outlives_its_candidate(evaluator_started_with_secrets, variant):
    ev = evaluator_started_with_secrets
    used = ev._spares.spare  # the next candidate runs here
    assert ev.evaluate(variant("wrong_math")).status is Status.INCORRECT
    assert not used.alive and not _running(used.process.pid)
    assert not used.scratch.exists()
    assert ev._spares.spare is not used


_ORPHANING_SCRIPT = """
import os, sys, threading, time
from kernelswarm.evaluators import SandboxEvaluator
from tests.conftest import SILU_TASK
from tests.evaluators.kernel_library import kernel_source, quick_settings
ev = SandboxEvaluator(SILU_TASK, "cpp", quick_settings(sys.argv[1], run_timeout_s=120))
ev.evaluate(ev.start_candidate)
spare = ev._spares.spare  # the next candidate's runner
print(spare.process.pid, spare.scratch, flush=True)


def die() -> None:  # while the runner spins; the spare started meanwhile is reported too
    while ev._spares.spare is None or ev._spares.spare is spare:
        time.sleep(0.1)  # the candidate's runner is being taken
    time.sleep(1.0)
    print(ev._spares.spare.process.pid, ev._spares.spare.scratch, flush=True)
    os._exit(0)


threading.Thread(target=die, daemon=True).start()
ev.evaluate(ev.start_candidate.derive(source=kernel_source("endless_loop")))
"""


def test_a_runner_stuck_in_a_kernel_exits_when_its_evaluator_dies(compile_cache):
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", _ORPHANING_SCRIPT, str(compile_cache)],
                          cwd=root, capture_output=True, text=True, timeout=120)
    (pid, scratch), (spare_pid, spare_scratch) = (line.split() for line in
                                                  done.stdout.splitlines()[:2])
    pid, spare_pid = int(pid), int(spare_pid)
    deadline = time.monotonic() + 5
    while (_running(pid) or _running(spare_pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    outlived = [p for p in (pid, spare_pid) if _running(p)]
    for group in outlived:
        os.killpg(group, signal.SIGKILL)  # do not leave a spinning process behind
    # a judge killed outright cannot delete its runners' scratch folders: the test does
    for folder in (scratch, spare_scratch):
        shutil.rmtree(folder, ignore_errors=True)
    assert not outlived, f"runners {outlived} outlived their evaluator"


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_folders_imported_from_under_a_private_tmp_are_kept_outermost_only(tmp_path,
                                                                        monkeypatch):
    # A virtual environment or checkout under /tmp: the runner's private /tmp would hide it
    # from imports still to come, so it is bound back (read-only); nested entries need no bind.
    from kernelswarm.evaluators.sandbox.isolation import _imported_from_private

    outer, inner = tmp_path / "venv", tmp_path / "venv" / "lib" / "site-packages"
    inner.mkdir(parents=True)
    monkeypatch.setattr(sys, "path", [str(inner), str(outer), "/usr/lib/python3"])
    kept = _imported_from_private([str(tmp_path.parent)])
    assert os.path.realpath(outer) in kept
    assert os.path.realpath(inner) not in kept
    assert all(k.startswith(os.path.realpath(tmp_path.parent) + "/") for k in kept)
    assert _imported_from_private(["/nonexistent-private"]) == []
