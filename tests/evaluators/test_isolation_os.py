"""OS isolation of the candidate runner: real processes started through ``isolated_command`` and
isolated by ``enter_isolation``, probing what a candidate would try.

Each test spawns a small Python process that isolates itself and then attempts escapes (connect
to a port this test listens on, fork, exec, signal or see this process, write outside scratch,
leave a process behind) and reports what happened as JSON. A level this machine cannot reach
(no namespaces, no seccomp) is skipped with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from kernelswarm.evaluators.sandbox import isolation, seccomp
from kernelswarm.evaluators.sandbox.isolation import (
    candidate_launchers,
    isolated_command,
    launch_command,
    launcher,
    probe,
)

SANDBOX = Path(isolation.__file__).parent
REPOSITORY = Path(__file__).resolve().parents[2]
IS_LINUX = sys.platform.startswith("linux")

# The probe imports the two modules under test by file, as a package of their own, so that it
# does not import torch (through kernelswarm.evaluators) unless a test asks for it.
PROBE = textwrap.dedent("""
    import ctypes, errno, importlib, json, os, signal, socket, subprocess, sys, threading, types
    from pathlib import Path

    config = json.loads(sys.argv[1])
    package = types.ModuleType("isolation_under_test")
    package.__path__ = [config["sandbox"]]
    sys.modules["isolation_under_test"] = package
    isolation = importlib.import_module("isolation_under_test.isolation")
    if config.get("torch"):
        import torch
        torch.set_num_threads(2)
    if config.get("stray"):
        if os.fork() == 0:  # a process started before isolation, as set-up might leave one
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)",
                                      config["stray"]])
    scratch = Path(config["scratch"])
    report = isolation.enter_isolation(scratch, hidden=[Path(p) for p in config["hidden"]],
                                       allow_processes=bool(config.get("window")))
    out = {"report": report, "pid": os.getpid(), "ppid": os.getppid()}
    if config.get("window"):  # a JIT's compiler runs here, and something is left behind
        for name, action in (("window_compiler", lambda: subprocess.run(["true"]).returncode),
                             ("window_socket", lambda: socket.socket() and "allowed")):
            try:
                out[name] = action()
            except OSError as exc:
                out[name] = errno.errorcode[exc.errno]
        if out["window_compiler"] == 0:
            left = [sys.executable, "-c", "import time; time.sleep(60)"]
            out["left"] = subprocess.Popen(left).pid
        out["strays"] = isolation.forbid_processes()

    def attempt(name, fn):
        try:
            out[name] = {"ok": True, "value": fn()}
        except OSError as exc:
            out[name] = {"ok": False, "errno": errno.errorcode.get(exc.errno, exc.errno)}

    def connect():
        with socket.create_connection(("127.0.0.1", config["port"]), timeout=2):
            return "connected"

    def write(path):
        Path(path).write_text("escaped")
        return str(path)

    handled = []
    signal.signal(signal.SIGUSR1, lambda *_: handled.append(1))
    attempt("connect", connect)
    attempt("fork", os.fork)
    attempt("subprocess", lambda: subprocess.run(["true"]).returncode)
    attempt("posix_spawn", lambda: os.posix_spawn("/bin/true", ["true"], {}))
    attempt("kill_victim", lambda: os.kill(config["victim"], signal.SIGKILL))
    attempt("signal_group", lambda: os.kill(0, 0))
    attempt("see_judge", lambda: os.path.exists(f"/proc/{config['judge']}"))
    attempt("judge_environ", lambda: len(Path(f"/proc/{config['judge']}/environ").read_bytes()))
    attempt("write_outside", lambda: write(config["outside"]))
    attempt("write_repository", lambda: write(config["repository_file"]))
    attempt("write_scratch", lambda: write(scratch / "result.txt"))
    attempt("write_tmp", lambda: write(f"/tmp/{config['tmp_name']}"))
    attempt("list_tmp", lambda: sorted(os.listdir("/tmp")))
    attempt("list_hidden", lambda: sorted(os.listdir(config["hidden"][0])))
    attempt("kill_self", lambda: os.kill(os.getpid(), signal.SIGUSR1))
    attempt("signal_thread", lambda: signal.pthread_kill(threading.get_ident(), signal.SIGUSR1))
    results = []
    worker = threading.Thread(target=lambda: results.append(sum(range(1000))))
    worker.start()
    worker.join()
    out["thread"] = results
    out["handled"] = len(handled)
    if config.get("torch"):
        x = torch.randn(256, 256)
        out["torch"] = bool(torch.allclose(x @ x.T, (x @ x.T).T, atol=1e-4))
    print(json.dumps(out))
""")


@pytest.fixture
def world(tmp_path):
    """What a probe is pointed at: a port this test listens on, a victim process, folders."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.3)
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    hidden = REPOSITORY / "experiments" / "tasks"  # the task files, held-out shapes included
    assert any(hidden.iterdir())
    host_tmp = Path("/tmp") / f"judge-{uuid.uuid4().hex[:8]}"
    host_tmp.write_text("the judge's")
    config = {"sandbox": str(SANDBOX), "scratch": str(scratch), "hidden": [str(hidden)],
              "port": listener.getsockname()[1], "victim": victim.pid, "judge": os.getpid(),
              "outside": str(tmp_path / "outside.txt"),
              "repository_file": str(REPOSITORY / f"escaped-{uuid.uuid4().hex[:8]}.txt"),
              "tmp_name": f"runner-{uuid.uuid4().hex[:8]}", "host_tmp": host_tmp.name}
    try:
        yield config, listener, victim
    finally:
        victim.kill()
        victim.wait()
        listener.close()
        host_tmp.unlink()
        Path(config["repository_file"]).unlink(missing_ok=True)
        Path("/tmp", config["tmp_name"]).unlink(missing_ok=True)


def run_probe(config: dict, argv_wrapper=None, timeout: float = 120) -> dict:
    argv = [sys.executable, "-c", PROBE, json.dumps(config)]
    scratch = Path(config["scratch"])
    if argv_wrapper is None:
        argv, options = isolated_command(argv, scratch)
    else:
        argv, options = argv_wrapper(argv), {"start_new_session": True}
    done = subprocess.run(argv, cwd=scratch, capture_output=True, text=True, timeout=timeout,
                          **options)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def require_namespaces() -> None:
    if not IS_LINUX:
        pytest.skip(f"no namespaces on {sys.platform}")
    found = launcher()
    if not found.prefix:
        pytest.skip(f"this machine gives no namespaces to the runner: {found.note}")


def require_seccomp() -> None:
    try:
        seccomp.architecture()
    except seccomp.SeccompUnavailable as exc:
        pytest.skip(str(exc))


def nothing_reached_the_outside(out: dict, config: dict, listener, victim) -> None:
    """The escapes every level must stop: network, processes, signals to others."""
    assert not out["connect"]["ok"]
    with pytest.raises(TimeoutError):
        listener.accept()
    for name in ("fork", "subprocess", "posix_spawn", "kill_victim", "signal_group"):
        assert out[name] == {"ok": False, "errno": "EPERM"}, name
    assert victim.poll() is None
    assert out["kill_self"]["ok"] and out["signal_thread"]["ok"] and out["handled"] == 2
    assert out["thread"] == [sum(range(1000))]
    assert out["write_scratch"]["ok"]
    assert (Path(config["scratch"]) / "result.txt").read_text() == "escaped"


def test_the_runner_gets_namespaces_seccomp_and_a_private_file_system(world):
    require_namespaces()
    require_seccomp()
    config, listener, victim = world
    out = run_probe(config)
    report = out["report"]
    assert {"pid", "net", "ipc", "mount"} <= set(report["isolation_namespaces"].split(","))
    assert report["isolation_seccomp"].startswith("filter")
    assert report["isolation"] == "namespaces+seccomp"
    assert "still writable" not in report["isolation_filesystem"]
    nothing_reached_the_outside(out, config, listener, victim)
    # its own PID namespace: it is pid 1 and cannot see the judge or its environment
    assert out["pid"] == 1 and out["ppid"] == 0
    assert out["see_judge"] == {"ok": True, "value": False}
    assert not out["judge_environ"]["ok"]
    # nothing writable outside scratch; /tmp is its own and empty; the run folder is hidden
    assert out["write_repository"] == {"ok": False, "errno": "EROFS"}
    assert not Path(config["repository_file"]).exists()
    assert not Path(config["outside"]).exists()  # under /tmp: it landed in the private one
    assert out["write_tmp"]["ok"] and not Path("/tmp", config["tmp_name"]).exists()
    assert config["host_tmp"] not in out["list_tmp"]["value"]
    assert out["list_hidden"] == {"ok": True, "value": []}


def test_a_compile_window_lets_a_compiler_run_and_names_what_it_left(world):
    require_namespaces()
    require_seccomp()
    config, listener, victim = world
    out = run_probe({**config, "window": True})
    assert out["report"]["isolation_processes"] == "allowed until forbid_processes()"
    assert out["window_compiler"] == 0 and out["window_socket"] == "EPERM"
    assert out["strays"] == [out["left"]]
    nothing_reached_the_outside(out, config, listener, victim)  # the window is closed again


def test_without_a_pid_namespace_no_compile_window_opens(world):
    require_seccomp()
    config, _, _ = world
    config = {**config, "repository_file": str(Path(config["scratch"]).parent / "shared.txt")}
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps({**config, "window": True})],
                          cwd=config["scratch"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["report"]["isolation_processes"].startswith("denied")
    assert out["window_compiler"] == "EPERM" and out["strays"] == []


def test_a_scratch_folder_inside_a_hidden_folder_stays_writable(world):
    require_namespaces()
    config, _, _ = world
    run = Path("/var/tmp") / f"run-{uuid.uuid4().hex[:8]}"  # outside /tmp, which is private
    scratch = run / "scratch"
    scratch.mkdir(parents=True)
    (run / "results.parquet").write_text("previous verdicts")
    try:
        out = run_probe({**config, "scratch": str(scratch), "hidden": [str(run)]})
        assert out["list_hidden"] == {"ok": True, "value": ["scratch"]}
        assert (scratch / "result.txt").read_text() == "escaped"
    finally:
        shutil.rmtree(run)


def test_what_the_runner_started_before_isolation_dies_with_it(world):
    require_namespaces()
    config, _, _ = world
    marker = f"stray-{uuid.uuid4().hex[:8]}"
    run_probe({**config, "stray": marker})
    deadline = time.monotonic() + 10
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_with(marker) == []


def test_killing_the_launcher_group_kills_the_runner(world):
    require_namespaces()
    config, _, _ = world
    marker = f"held-{uuid.uuid4().hex[:8]}"
    argv, options = isolated_command(
        [sys.executable, "-c", "import time; time.sleep(60)", marker], Path(config["scratch"]))
    process = subprocess.Popen(argv, cwd=config["scratch"], **options)
    deadline = time.monotonic() + 30
    while not _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_with(marker)
    os.killpg(process.pid, signal.SIGKILL)
    assert process.wait(timeout=10) == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_with(marker) == []


def test_a_runner_killed_by_a_signal_reports_that_signal(world):
    require_namespaces()
    config, _, _ = world
    argv, options = isolated_command(
        [sys.executable, "-c", "import ctypes; ctypes.string_at(0)"], Path(config["scratch"]))
    done = subprocess.run(argv, cwd=config["scratch"], capture_output=True, timeout=60,
                          **options)
    assert done.returncode == -signal.SIGSEGV


def test_the_user_namespace_level(world):
    require_seccomp()
    user = [found for found in candidate_launchers() if "user" in found.namespaces]
    if not user:
        pytest.skip("util-linux unshare is not installed")
    refused = probe(user[0])
    if refused:
        pytest.skip(f"unprivileged user namespaces are not available here: {refused}")
    config, listener, victim = world
    out = run_probe(config, lambda argv: launch_command(user[0], argv))
    assert set(out["report"]["isolation_namespaces"].split(",")) == {"pid", "net", "ipc",
                                                                     "mount", "user"}
    nothing_reached_the_outside(out, config, listener, victim)
    assert out["pid"] == 1 and out["see_judge"]["value"] is False
    assert not Path(config["outside"]).exists()
    assert out["write_repository"]["errno"] in ("EROFS", "EACCES")
    assert not Path(config["repository_file"]).exists()
    assert out["list_hidden"] == {"ok": True, "value": []}


def test_without_namespaces_the_seccomp_filter_still_holds(world):
    """The level of a Linux machine that allows no namespaces: session and seccomp only."""
    require_seccomp()
    config, listener, victim = world
    config = {**config, "repository_file": str(Path(config["scratch"]).parent / "shared.txt")}
    out = run_probe(config, lambda argv: argv)
    assert out["report"]["isolation_namespaces"] == "none"
    assert out["report"]["isolation"] == "seccomp"
    assert out["report"]["isolation_filesystem"].startswith("shared")
    nothing_reached_the_outside(out, config, listener, victim)
    if "landlock ABI" not in out["report"]["isolation_writes"]:
        pytest.skip(f"no Landlock here: {out['report']['isolation_writes']}")
    for name in ("write_outside", "write_repository", "write_tmp"):  # writes beneath scratch only
        assert out[name] == {"ok": False, "errno": "EACCES"}, name
    assert not Path(config["outside"]).exists() and not Path("/tmp", config["tmp_name"]).exists()


def test_torch_computes_with_threads_after_isolation(world):
    require_seccomp()
    config, _, _ = world
    out = run_probe({**config, "torch": True})
    assert out["torch"] is True
    assert out["report"]["isolation_seccomp"].startswith("filter")


def test_an_unknown_scratch_folder_is_refused(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        isolated_command(["true"], tmp_path / "missing")


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            status = (entry / "status").read_text()
        except OSError:
            continue
        if marker.encode() in cmdline and "State:\tZ" not in status:
            found.append(int(entry.name))
    return found


JUDGE = textwrap.dedent("""
    import importlib, json, subprocess, sys, types
    package = types.ModuleType("isolation_under_test")
    package.__path__ = [sys.argv[1]]
    sys.modules["isolation_under_test"] = package
    isolation = importlib.import_module("isolation_under_test.isolation")
    isolation._drop_capabilities()  # a judge without privileges, as a user's would run
    runner = (
        "import importlib, json, os, sys, types\\n"
        "package = types.ModuleType('isolation_under_test')\\n"
        "package.__path__ = [sys.argv[1]]\\n"
        "sys.modules['isolation_under_test'] = package\\n"
        "isolation = importlib.import_module('isolation_under_test.isolation')\\n"
        "before = len(open(f'/proc/{os.getppid()}/environ', 'rb').read()) > 0\\n"
        "report = isolation.enter_isolation(sys.argv[2])\\n"
        "try:\\n"
        "    read = len(open(f'/proc/{os.getppid()}/environ', 'rb').read()) > 0\\n"
        "except OSError as exc:\\n"
        "    read = type(exc).__name__\\n"
        "print(json.dumps({'report': report, 'before': before, 'read': read}))\\n")
    done = subprocess.run([sys.executable, "-c", runner, sys.argv[1], sys.argv[2]],
                          capture_output=True, text=True, cwd=sys.argv[2])
    print(done.stdout.strip() or json.dumps({"err": done.stderr}))
""")


def test_a_runner_without_namespaces_cannot_read_the_judges_process_files(tmp_path):
    """Without a PID namespace the judge's /proc entries are visible; Landlock keeps a confined
    runner from the ones that need ptrace access (environment, memory, descriptors), even when
    judge and runner are the same unprivileged user."""
    require_seccomp()
    done = subprocess.run([sys.executable, "-c", JUDGE, str(SANDBOX), str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert "report" in out, out
    if "landlock ABI" not in out["report"]["isolation_writes"]:
        pytest.skip(f"no Landlock here: {out['report']['isolation_writes']}")
    assert out["before"] is True and out["read"] == "PermissionError"
