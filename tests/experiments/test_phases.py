"""run.log says where a run's time went: one [phase] line as each phase ends, with the CPU
seconds of the driver and of every process of the run, and the load (experiments/run/phases.py).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time

from kernelswarm.experiments.run.phases import PhaseLog, process_started, tree_cpu_s

# The phases a run's log names, in order (experiments/run/execute.py); a local Ray instance
# stops on a thread of its own once the sinks are closed, while the summary and the report are
# written, so "ray stopped" comes anywhere after "sinks closed".
RUN_PHASES = ["configuration loaded", "run folder ready", "ray started", "actors created",
              "starting kernel judged", "search ended", "best kernels confirmed",
              "sinks closed", "summary written", "report written"]
RAY_STOPPED = "ray stopped"
LINE = re.compile(r"^\[phase\] (?P<phase>.+?) +at +(?P<at>[\d.]+) s +\+ *(?P<took>[\d.]+) s +"
                  r"cpu: driver (?P<driver>[\d.]+) s, run (?P<run>[\d.]+) s +load [\d. ]+$")


def test_lines_marked_before_the_log_is_known_are_written_when_it_is(tmp_path):
    phases = PhaseLog(started=0.0)
    phases.mark("configuration loaded")
    log = tmp_path / "run" / "run.log"
    phases.attach(log)
    phases.mark("run folder ready")
    lines = log.read_text().splitlines()
    assert [LINE.match(line)["phase"] for line in lines] == ["configuration loaded",
                                                             "run folder ready"]


def test_the_runs_cpu_counts_its_child_processes():
    """A busy child's CPU counts while it runs (a run's actors live until the run ends);
    this process only waits meanwhile."""
    before = tree_cpu_s()
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        give_up = time.monotonic() + 60
        while tree_cpu_s() < before + 0.5 and time.monotonic() < give_up:
            time.sleep(0.1)
        assert tree_cpu_s() >= before + 0.5
    finally:
        child.kill()
        child.wait()


def test_the_process_start_is_before_now():
    assert time.time() - 3600 < process_started() <= time.time()


def test_a_runs_log_names_every_phase_in_order_with_its_times(small_run):
    outcome, _, _ = small_run
    lines = [LINE.match(line) for line in (outcome.run_dir / "run.log").read_text().splitlines()
             if line.startswith("[phase]")]
    assert all(lines), lines
    phases = [m["phase"] for m in lines]
    assert [p for p in phases if p != RAY_STOPPED] == RUN_PHASES
    assert phases.count(RAY_STOPPED) == 1
    assert phases.index(RAY_STOPPED) > phases.index("sinks closed")
    at = [float(m["at"]) for m in lines]
    assert at == sorted(at)
    took = sum(float(m["took"]) for m in lines)
    assert abs(took - at[-1]) < 0.05 * len(lines)  # each phase's time, from the process start


_CONFIRMING = """
import io, sys, time
from rich.console import Console
from kernelswarm.experiments.run.execute import _drive

REPORT = ("kernelswarm.experiments.report.writer", "matplotlib.pyplot", "mlflow")


class Swarm:  # a search that ends at once, then confirms for as long as the imports take
    startup_s = 1.0

    def start(self):
        assert not any(m in sys.modules for m in REPORT)

    def done(self, timeout=0.0):
        return True

    def stats(self):
        return {}

    def confirm(self, top, repeats, announce):
        give_up = time.monotonic() + 120
        while not all(m in sys.modules for m in REPORT) and time.monotonic() < give_up:
            time.sleep(0.1)
        print("LOADED", all(m in sys.modules for m in REPORT))

    def finish(self, stop_reason=None, confirmation=None):
        return "result"


print(_drive(Swarm(), Console(file=io.StringIO()), confirm=(2, 3)))
"""


def test_the_reports_libraries_load_while_the_best_kernels_are_confirmed():
    """matplotlib and MLflow (seconds of CPU) load while the driver waits for the confirmation,
    not after it, when the report is written."""
    proc = subprocess.run([sys.executable, "-c", _CONFIRMING], capture_output=True, text=True,
                          timeout=300)
    assert "LOADED True" in proc.stdout, proc.stdout + proc.stderr
