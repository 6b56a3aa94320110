"""Ray started on a thread while a run is prepared (experiments/run/ray_start.py).

Ray's processes die with the thread that started them: a thread that returned once connected
left a run whose GCS was gone ("Failed to connect to GCS within 60 seconds") a minute later.
Run in a fresh interpreter, as ``kernelswarm run`` is, with a local instance of its own.
"""

from __future__ import annotations

import subprocess
import sys

_PROBE = """
import sys, time
from kernelswarm.experiments.run.ray_start import RayStart

start = RayStart(None, 1)
print("printed to stderr while Ray starts", file=sys.stderr)
started = start.ready()
import ray

time.sleep(2)  # the starting thread would have returned long since
alive = ray.get(ray.remote(lambda: "a task ran").remote(), timeout=60)
start.stop()
print("HELD", repr(started.held))
print("TASK", alive)
print("STOPPED", not ray.is_initialized())
print("after the start", file=sys.stderr)
"""


def test_ray_runs_tasks_after_it_started_and_stops_with_stop():
    proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "TASK a task ran" in proc.stdout
    assert "STOPPED True" in proc.stdout
    # what was written while Ray started was held for the run's log, not shown; stderr is back
    held = next(line for line in proc.stdout.splitlines() if line.startswith("HELD"))
    assert "printed to stderr while Ray starts" in held
    assert "printed to stderr while Ray starts" not in proc.stderr
    assert "after the start" in proc.stderr
