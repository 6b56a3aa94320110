"""Screenshots of a run in MLflow's UI, taken with headless Chromium: the experiment list, the
run's parent run, one lineage's run and the best kernel's source in the artifact view.

    python -m benchmarks.mlflow_screens RUN_DIR --out FOLDER

Starts ``mlflow ui`` on the run's own store (from its config.json), on loopback only, and stops
it at the end. Needs a Chromium binary (Debian: ``apt-get install -y chromium``).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from kernelswarm.experiments.sinks import read_mlflow_run
from kernelswarm.experiments.sinks.mlflow_runs import find_parent_run
from kernelswarm.experiments.sinks.mlflow_store import absolute_uri

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                  "--window-size=1400,1000"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until_up(url: str, process: subprocess.Popen, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"mlflow ui exited with {process.returncode} before serving {url}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2):
                return
        except OSError:
            time.sleep(1.0)
    raise TimeoutError(f"mlflow ui did not answer at {url} within {timeout_s:.0f} s")


def screenshot(browser: str, url: str, path: Path, wait_s: float = 12.0) -> Path:
    """One PNG of ``url`` as a fresh Chromium profile renders it ``wait_s`` after loading.

    Chromium's own ``--screenshot`` fires at the load event, before MLflow's single-page app has
    fetched and drawn its runs, and ``--virtual-time-budget`` never ends on that app (it keeps
    requests open). So the page is driven over the DevTools protocol instead (loopback port):
    navigate, wait, capture.
    """
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="chromium-", ignore_cleanup_errors=True) as profile:
        process = subprocess.Popen(
            [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
             f"--remote-debugging-port={port}", "--remote-debugging-address=127.0.0.1",
             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        try:
            png = asyncio.run(_capture(port, url, wait_s))
        finally:  # the browser's helpers share its process group: stop them all
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=30)
            time.sleep(1.0)  # let the helpers let go of the profile folder
    path.write_bytes(png)
    return path


async def _capture(port: int, url: str, wait_s: float) -> bytes:
    import aiohttp  # installed with Ray

    async with aiohttp.ClientSession() as session:
        for _ in range(60):  # the browser's DevTools endpoint comes up within seconds
            try:
                async with session.get(f"http://127.0.0.1:{port}/json/list") as reply:
                    targets = [t for t in await reply.json() if t.get("type") == "page"]
                if targets:
                    break
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.5)
        else:
            raise RuntimeError("chromium's DevTools endpoint did not come up")
        async with session.ws_connect(targets[0]["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            calls = iter(range(1, 1_000_000))

            async def call(method: str, **params: object) -> dict:
                number = next(calls)
                await ws.send_json({"id": number, "method": method, "params": params})
                async for message in ws:
                    doc = json.loads(message.data)
                    if doc.get("id") == number:
                        if "error" in doc:
                            raise RuntimeError(f"{method}: {doc['error']}")
                        return doc["result"]
                raise RuntimeError(f"chromium closed the connection during {method}")

            await call("Page.enable")
            await call("Page.navigate", url=url)
            await asyncio.sleep(wait_s)  # the app fetches its runs after the load event
            shot = await call("Page.captureScreenshot", format="png")
    return base64.b64decode(shot["data"])


def take_screens(run_dir: Path, out: Path, browser: str) -> list[Path]:
    """The screenshots of ``run_dir``'s MLflow runs, written under ``out``."""
    config = json.loads((run_dir / "config.json").read_text())
    uri = absolute_uri(config["tracking"]["mlflow_uri"])
    experiment = config["tracking"].get("experiment") or config["run"]["name"]
    found = find_parent_run(uri, experiment, run_dir.name)
    if found is None:
        raise SystemExit(f"no MLflow run of {run_dir.name} in experiment {experiment!r} at {uri}")
    parent_id, experiment_id = found
    logged = read_mlflow_run(uri, parent_id)
    lineage = logged.lineages[min(n for n in logged.lineages if n >= 0)]
    best = next((a for a in logged.parent.artifacts if a.startswith("best/")), "")
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    out.mkdir(parents=True, exist_ok=True)
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1"],
        stdout=open(out / "mlflow_ui.log", "w"), stderr=subprocess.STDOUT,
        start_new_session=True)
    try:
        _wait_until_up(base, server)
        runs = f"{base}/#/experiments/{experiment_id}/runs"
        pages = {"experiment_list": f"{base}/#/experiments/{experiment_id}/runs",
                 "parent_run": f"{runs}/{parent_id}",
                 "lineage_run": f"{runs}/{lineage.run_id}",
                 "best_kernel_artifact": f"{runs}/{parent_id}/artifacts/{best}",
                 "report_artifact": f"{runs}/{parent_id}/artifacts/report/report.html"}
        # MLflow 3 opens in its GenAI view; kernelswarm's runs are a training-style table.
        view = "?workflowType=machine_learning"
        # The runs table loads last (a search over every run of the experiment): it waits longer.
        return [screenshot(browser, url + view, out / f"{name}.png",
                           40.0 if name == "experiment_list" else 12.0)
                for name, url in pages.items()]
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--out", type=Path, required=True, help="where the PNGs go")
    parser.add_argument("--browser", default=shutil.which("chromium") or "chromium")
    args = parser.parse_args(argv)
    for path in take_screens(args.run_dir.resolve(), args.out, args.browser):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
