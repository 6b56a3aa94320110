"""``ray job submit -- kernelswarm sweep ...`` against a local head: a cluster of its own started
by ``ray start --head`` with its dashboard (the job server), the sweep submitted through Ray's own
job CLI, as a user submits one to a KubeRay or ``ray up`` cluster. The job's entrypoint runs on
the head with ``RAY_ADDRESS`` set, so the sweep joins that cluster instead of starting its own.

It needs ``ray[default]`` (the dashboard's packages, in the ``dev`` extra).
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    importlib.util.find_spec("aiohttp_cors") is None,
    reason="ray job submit needs Ray's dashboard: pip install 'ray[default]'")]


SWEEP = """
[sweep]
name = "job"
out_dir = "sweeps"

[base]
search.candidates_per_lineage = 1
search.wall_time_s = 1800
search.tester = false
search.confirm_top = 0
timing.budget_s = 0.05
timing.min_repeats = 3
timing.max_repeats = 20
evaluator.seeds = 1
evaluator.check_heldout = false
evaluator.cache_dir = "{cache}"
tracking.mlflow = false

[[cells]]
name = "one"
"search.lineages" = 1
"""

HEAD_START_S = 120.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def ray_head(env: dict[str, str], dashboard: int) -> Iterator[str]:
    """A Ray head started by ``ray start --head --block`` with ``env``; its address on the
    loopback. ``dashboard``: the port of its dashboard (and job server) on the loopback. Stopped in the end by ending that command (which stops what it started), then
    its process group: never ``ray stop``, which would stop every Ray instance on the machine.
    """
    temp = Path(tempfile.mkdtemp(prefix="ksj", dir="/tmp"))  # short: Ray's socket paths
    port = _free_port()
    ray = Path(sys.executable).parent / "ray"
    # The head's agents get ports of their own: their defaults (the job agent's 52365 above all)
    # are taken by the session's Ray instance, and an agent that cannot bind never registers,
    # so the job server would answer "No available agent" for ever.
    agents = [f"--dashboard-agent-listen-port={_free_port()}",
              f"--dashboard-agent-grpc-port={_free_port()}",
              f"--runtime-env-agent-port={_free_port()}", f"--metrics-export-port={_free_port()}"]
    head = subprocess.Popen(
        [str(ray), "start", "--head", f"--port={port}", "--num-cpus=2", "--include-dashboard=true",
         "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}", *agents,
         "--disable-usage-stats", f"--temp-dir={temp}", "--block"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)
    try:
        deadline = time.monotonic() + HEAD_START_S
        while not (temp / "ray_current_cluster").is_file():
            if head.poll() is not None or time.monotonic() > deadline:
                head.kill()
                pytest.fail(f"ray start --head did not start: {head.stdout.read()[-3000:]}")
            time.sleep(0.5)
        yield f"127.0.0.1:{port}"
    finally:
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()
        try:
            os.killpg(head.pid, signal.SIGKILL)  # anything of it left behind
        except ProcessLookupError:
            pass
        shutil.rmtree(temp, ignore_errors=True)


def _dashboard_up(url: str) -> bool:
    """Whether the dashboard answers (a refusal for want of the token is an answer too)."""
    try:
        with urllib.request.urlopen(f"{url}/api/version", timeout=2):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def test_a_sweep_submitted_as_a_ray_job_runs_on_the_head_it_was_submitted_to(
        tmp_path, compile_cache):
    (tmp_path / "grid.toml").write_text(SWEEP.format(cache=compile_cache).replace(
        'out_dir = "sweeps"', f'out_dir = "{tmp_path / "sweeps"}"'))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    dashboard = _free_port()
    url = f"http://127.0.0.1:{dashboard}"
    with ray_head(env, dashboard=dashboard) as address:
        deadline = time.monotonic() + 120  # the dashboard starts after the head's GCS
        while not _dashboard_up(url):
            assert time.monotonic() < deadline, f"no dashboard at {url}"
            time.sleep(1)
        # The entrypoint, as a user writes it: the sweep file by path on the head.
        entrypoint = [sys.executable, "-m", "kernelswarm.experiments.commands.cli", "sweep",
                      str(tmp_path / "grid.toml")]
        submit_env = {**env, "PATH": f"{os.path.dirname(sys.executable)}:{env.get('PATH', '')}"}
        # The job server answers before the head's agent that runs jobs has registered; until
        # then it refuses with "No available agent ..., please try again later".
        deadline = time.monotonic() + 120
        while True:
            proc = subprocess.run(["ray", "job", "submit", "--address", url, "--", *entrypoint],
                                  env=submit_env, capture_output=True, text=True, timeout=600,
                                  cwd=tmp_path)
            if "No available agent" not in proc.stdout + proc.stderr \
                    or time.monotonic() > deadline:
                break
            time.sleep(2)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert "succeeded" in output, output[-4000:]
    # The job's output (streamed back by ray job submit): it joined the head's cluster.
    port = address.rsplit(":", 1)[1]
    assert f":{port} (2 CPUs" in " ".join(proc.stdout.split()), output[-4000:]
    [sweep_dir] = (tmp_path / "sweeps").iterdir()
    [cell] = [p for p in sweep_dir.iterdir() if (p / "config.json").is_file()]
    assert json.loads((cell / "summary.json").read_text())["best"] is not None
