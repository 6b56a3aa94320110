"""The runner template: runners forked from a process that imported torch once, in the same
isolation as runners started through ``unshare``, reporting how they ended, and never outliving
the judge."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from kernelswarm.evaluators.judge.runner_process import RunnerProcess
from kernelswarm.evaluators.judge.runner_template import (
    SWITCH_ENV,
    RunnerTemplate,
    TemplateChild,
    runner_template,
)
from kernelswarm.evaluators.measure.shared_memory import Arena
from kernelswarm.evaluators.sandbox.isolation import isolation_marker, launcher
from kernelswarm.search import Status

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the runner template forks: Linux only")


# End of file on its request pipe: the request loop returns 0, or the watcher of the judge's
# pipe (evaluators/runner/limits.py exit_with_parent) exits with 3 first.
CLEAN_EXITS = (0, 3)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return int(stat.read().rsplit(b")", 1)[1].split()[1])


class _Idle:
    """A runner spawned with pipes the test holds: it waits for its first request."""

    def __init__(self, template: RunnerTemplate) -> None:
        self.scratch = Path(tempfile.mkdtemp(prefix="ks-template-test-"))
        self.arena = Arena.create(1 << 16)
        request_r, self.request_w = os.pipe()
        self.reply_r, reply_w = os.pipe()
        with open(self.scratch / "runner.log", "wb") as log:
            self.child = template.spawn((request_r, reply_w, self.arena.fd, log.fileno()),
                                        self.scratch, None,
                                        isolation_marker(template.namespaces)
                                        if template.namespaces else "")
        os.close(request_r)
        os.close(reply_w)

    def end(self) -> int:
        os.close(self.request_w)  # end of file on its requests: the runner exits
        code = self.child.wait(timeout=60)
        os.close(self.reply_r)
        self.arena.close()
        shutil.rmtree(self.scratch, ignore_errors=True)
        return code


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}


@pytest.fixture(scope="module")
def template():
    made = RunnerTemplate(_env(), launcher().namespaces)
    yield made
    made.close()


def test_a_runner_is_forked_in_its_own_session_and_reports_how_it_ended(template):
    idle = _Idle(template)
    assert isinstance(idle.child, TemplateChild) and idle.child.poll() is None
    assert os.getpgid(idle.child.pid) == idle.child.pid  # a session of its own: killpg works
    assert _parent(idle.child.pid) == template.process.pid
    assert idle.end() in CLEAN_EXITS
    killed = _Idle(template)
    os.killpg(killed.child.pid, signal.SIGKILL)
    assert killed.end() == -signal.SIGKILL


def test_the_template_ends_with_its_judge_and_takes_its_runners_with_it(tmp_path):
    script = f"""
import os, sys, tempfile
sys.path[:0] = {sys.path!r}
from kernelswarm.evaluators.sandbox.isolation import launcher
from kernelswarm.evaluators.judge.runner_template import RunnerTemplate
from tests.evaluators.test_runner_template import _Idle, _env
template = RunnerTemplate(_env(), launcher().namespaces)
idle = _Idle(template)
print(template.process.pid, idle.child.pid, flush=True)
os._exit(0)  # the judge dies without closing anything
"""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    template_pid, runner_pid = map(int, done.stdout.split())
    deadline = time.monotonic() + 30
    while (_alive(template_pid) or _alive(runner_pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(template_pid) and not _alive(runner_pid)


@pytest.mark.parametrize("ending", ["sys.exit(0)", "os._exit(0)"])
def test_a_template_leaves_no_folder_behind_however_its_judge_ends(tmp_path, ending):
    """Its log and working folder go with it: a judge that returns and one that dies (a Ray
    worker killed) leave no kernelswarm-template-* folder in the temporary directory."""
    script = f"""
import os, sys
sys.path[:0] = {sys.path!r}
from kernelswarm.evaluators.sandbox.isolation import launcher
from kernelswarm.evaluators.judge.runner_template import runner_template
from tests.evaluators.test_runner_template import _Idle, _env
template = runner_template(_env(), launcher().namespaces)
_Idle(template).end()
print(template.process.pid, flush=True)
{ending}
"""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    template_pid = int(done.stdout.split()[-1])
    deadline = time.monotonic() + 30
    while _alive(template_pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(template_pid)
    assert not list(tmp_path.glob("kernelswarm-template-*"))


def test_a_template_of_another_environment_is_closed_only_once_its_runners_ended(monkeypatch):
    monkeypatch.delenv(SWITCH_ENV, raising=False)
    first = runner_template(_env(), launcher().namespaces)
    assert first is not None
    idle = _Idle(first)
    second = runner_template({**_env(), "KS_TEST_CHANGED": "1"}, launcher().namespaces)
    assert second is not None and second is not first
    assert first.alive and idle.child.poll() is None  # its runner still serves its candidate
    assert idle.end() in CLEAN_EXITS
    assert runner_template({**_env(), "KS_TEST_CHANGED": "1"}, launcher().namespaces) is second
    assert not first.alive


@pytest.mark.parametrize(("device", "switch", "forked"), [
    ("cpu", None, True), ("cpu", "0", False), ("cuda", None, True), ("cuda", "0", False)])
def test_runners_come_from_the_template_unless_switched_off(monkeypatch, device, switch,
                                                            forked):
    if switch is None:
        monkeypatch.delenv(SWITCH_ENV, raising=False)
    else:
        monkeypatch.setenv(SWITCH_ENV, switch)
    # a request the runner never answers: it is killed first
    prepare = {"type": "prepare-nothing", "settings": {"device": device}}
    runner = RunnerProcess(Arena.create(1 << 16), prepare)
    try:
        assert isinstance(runner.process, TemplateChild if forked else subprocess.Popen)
        expected = ("forked from the runner template" if forked
                    else f"an interpreter of its own ({SWITCH_ENV}=0)")
        assert runner.started_as == expected
    finally:
        runner.close()


def test_a_forked_runner_gets_the_same_isolation_and_no_socket(evaluator, start):
    evaluation = evaluator.evaluate(start)
    assert evaluation.status is Status.OK, evaluation.message
    assert isinstance(evaluator._spares.spare.process, TemplateChild)
    assert evaluation.cost.runner_started_as == "forked from the runner template"
    assert evaluation.metrics["isolation_sockets_closed"] == "0"  # the template's is not there
    if {"pid", "net", "ipc", "mount"} <= set(launcher().namespaces):
        assert evaluation.metrics["isolation_namespaces"].startswith("pid,net,ipc,mount")
        assert evaluation.metrics["isolation"] == "namespaces+seccomp"


def test_the_start_up_benchmark_times_both_ways(capsys):
    from benchmarks.runner_start import main

    assert main(["silu_and_mul", "cpp", "1"]) == 0
    rows = {line[:28].strip(): [float(x) for x in line[28:].split()]
            for line in capsys.readouterr().out.splitlines()[2:]}
    assert set(rows) == {"forked from the template", "an interpreter of its own"}
    assert all(0 < low <= median <= high for median, low, high in rows.values())
