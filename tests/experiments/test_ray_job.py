"""``kernelswarm sweep`` as a Ray job's entrypoint: a head started by ``ray start`` (a cluster of
its own, as a user's is), and the command run with the environment a job's entrypoint gets on
the head (``RAY_ADDRESS``, and the cluster's authentication token).

``ray job submit`` itself needs Ray's job server, which runs in the dashboard; this environment
has Ray without ``ray[default]``, so ``ray start --include-dashboard=true`` refuses to start
("Cannot include dashboard with missing packages": aiohttp_cors, opencensus, prometheus_client
and grpcio are not installed). What the job server would do, start the entrypoint with the
cluster's address in its environment, is what this test does; docs/cluster.md says so.
"""

from __future__ import annotations

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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

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
def ray_head(env: dict[str, str]) -> Iterator[str]:
    """A Ray head started by ``ray start --head --block`` with ``env``; its address on the
    loopback. Stopped in the end by ending that command (which stops what it started), then
    its process group: never ``ray stop``, which would stop every Ray instance on the machine.
    """
    temp = Path(tempfile.mkdtemp(prefix="ksj", dir="/tmp"))  # short: Ray's socket paths
    port = _free_port()
    ray = Path(sys.executable).parent / "ray"
    head = subprocess.Popen(
        [str(ray), "start", "--head", f"--port={port}", "--num-cpus=2",
         "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}", "--block"],
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


def test_a_sweep_run_as_a_job_entrypoint_joins_the_head_it_is_given(tmp_path, compile_cache):
    (tmp_path / "grid.toml").write_text(SWEEP.format(cache=compile_cache))
    # Ray 2.60's `ray start` turns on token authentication: the head and the command share a
    # token of this test's own (a user's ~/.ray/auth_token is left alone).
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    kernelswarm = Path(sys.executable).parent / "kernelswarm"
    with ray_head(env) as address:
        proc = subprocess.run([str(kernelswarm), "sweep", "grid.toml"], cwd=tmp_path,
                              env={**env, "RAY_ADDRESS": address}, capture_output=True,
                              text=True, timeout=600)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    # It joined the head (whose address Ray reports by the machine's IP, on the same port)
    # rather than starting an instance of its own, which would have a port of its own.
    port = address.rsplit(":", 1)[1]
    assert f":{port} (2 CPUs" in " ".join(proc.stdout.split()), output[-4000:]
    [sweep_dir] = (tmp_path / "sweeps").iterdir()
    [cell] = [p for p in sweep_dir.iterdir() if (p / "config.json").is_file()]
    summary = json.loads((cell / "summary.json").read_text())
    assert summary["best"] is not None
    import pandas as pd

    table = pd.read_parquet(sweep_dir / "cells.parquet")
    assert list(table["status"]) == ["finished"] and list(table["records"]) == [2]
