"""What the fault tests (test_faults.py) share: an evaluator that counts what the workers
executed, the count checked against Parquet, a cluster in a process of its own, and a driver
killed with SIGKILL once it has recorded a step."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import ray

from kernelswarm.evaluators import EvaluatorSettings
from kernelswarm.experiments.sinks import read_evaluations

# A module of its own, written next to the run: the workers' processes unpickle it by value
# (nothing to import there), and a driver started in a subprocess imports it by path.
COUNTING = textwrap.dedent("""
    import json, os
    from kernelswarm.evaluators.judge.evaluator import SandboxEvaluator

    COUNTER = {counter!r}

    class CountingEvaluator(SandboxEvaluator):
        \"\"\"A SandboxEvaluator that appends one line per finished evaluation to COUNTER.\"\"\"

        def evaluate(self, candidate):
            evaluation = super().evaluate(candidate)
            with open(COUNTER, "a") as out:
                out.write(json.dumps({{"id": candidate.id, "pid": os.getpid()}}) + "\\n")
            return evaluation
""")
NOT_ON_A_WORKER = {"COMPILE_ERROR", "REJECTED"}  # verdicts of the lineage's own build


def counting_module(folder: Path):
    """``CountingEvaluator``'s module, written to ``folder`` and imported; its counter file."""
    counter = folder / "executed.jsonl"
    path = folder / "counting_evaluator.py"
    path.write_text(COUNTING.format(counter=str(counter)))
    spec = importlib.util.spec_from_file_location("counting_evaluator", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["counting_evaluator"] = module
    spec.loader.exec_module(module)
    ray.cloudpickle.register_pickle_by_value(module)
    return module


def settings(cache: Path) -> EvaluatorSettings:
    return EvaluatorSettings(cache_dir=cache, timing_budget_s=0.05, min_repeats=3, warmup=1,
                             seeds=1, flush_cache=False)


def check_counts(run_dirs: Path | list[Path], counter: Path, unrecorded: int = 0,
                 repeated: int = 0) -> dict[str, int]:
    """The Parquet records of one run (or of a sweep's cells) against what the workers executed.

    In each run, each seq and each (lineage, step) is recorded once. Every verdict a worker gave
    (a run's first record of a candidate id that its lineage did not build into a failure or
    reuse) was executed by a worker, and every execution is such a verdict. Allowed:
    ``unrecorded`` executed ids no record holds (in flight when the driver died) and
    ``repeated`` executions beyond the verdicts (a worker lost after it finished but before its
    answer arrived: evaluated again).
    """
    expected: Counter[str] = Counter()
    records = 0
    for run_dir in [run_dirs] if isinstance(run_dirs, Path) else run_dirs:
        rows = {r["seq"]: r for r in read_evaluations(run_dir).to_pylist()}
        assert sorted(rows) == list(range(len(rows))), f"{run_dir}: seqs are not 0..n-1"
        keys = Counter((r["lineage"], r["step"]) for r in rows.values())
        assert max(keys.values()) == 1, \
            f"{run_dir}: recorded twice: {[k for k, n in keys.items() if n > 1]}"
        evaluated: set[str] = set()
        for _, r in sorted(rows.items()):
            if r["candidate_id"] not in evaluated and r["status"] not in NOT_ON_A_WORKER \
                    and "reused_from" not in json.loads(r["metrics"] or "{}"):
                evaluated.add(r["candidate_id"])
        expected.update(evaluated)
        records += len(rows)
    executed = Counter(json.loads(line)["id"] for line in counter.read_text().splitlines())
    missing = expected - executed
    assert not missing, f"recorded but never executed: {sorted(missing)}"
    lost = set(executed) - set(expected)
    assert len(lost) <= unrecorded, f"executed but not recorded: {sorted(lost)}"
    again = (executed - expected).total() - len(lost)  # a lost id's first run is not "again"
    assert again <= repeated, f"executed more often than recorded: {executed}"
    return {"records": records, "evaluated": expected.total(), "executed": executed.total()}


CLUSTER_SCRIPT = textwrap.dedent("""
    import sys
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    print(cluster.address, flush=True)
    sys.stdin.read()  # until the test closes it
    cluster.shutdown()
""")

# `kernelswarm` with the counting evaluator in place of the SandboxEvaluator it would build.
DRIVER_SCRIPT = textwrap.dedent("""
    import importlib.util, sys
    import ray
    from kernelswarm.experiments.run import prepare
    from kernelswarm.experiments.commands.cli import main

    spec = importlib.util.spec_from_file_location("counting_evaluator", sys.argv[1])
    counting = sys.modules["counting_evaluator"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(counting)
    ray.cloudpickle.register_pickle_by_value(counting)
    prepare.SandboxEvaluator = counting.CountingEvaluator
    sys.exit(main(sys.argv[2:]))
""")


def records_in(run_dir: Path) -> int:
    try:
        return len(set(read_evaluations(run_dir).column("seq").to_pylist()))
    except (FileNotFoundError, OSError):
        return 0


@contextlib.contextmanager
def cluster() -> Iterator[str]:
    """A one-node cluster in a process of its own (it outlives the drivers); its address."""
    cluster = subprocess.Popen([sys.executable, "-c", CLUSTER_SCRIPT], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    try:
        yield cluster.stdout.readline().strip()
    finally:
        cluster.stdin.close()
        cluster.wait(timeout=120)


def kill_after_a_step(driver: subprocess.Popen, runs: Callable[[], list[Path]],
                       log: Path) -> Path:
    """SIGKILL ``driver`` once one of its ``runs`` has recorded a lineage's first step;
    the folder holding that run."""
    deadline = time.monotonic() + 300
    found = None
    while time.monotonic() < deadline and driver.poll() is None:
        found = next((run for run in runs() if records_in(run) >= 2), None)
        if found is not None:  # the start and one step
            break
        time.sleep(0.2)
    assert driver.poll() is None, \
        f"the driver ended before it could be killed: {log.read_text()[-3000:]}"
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    assert found is not None, "no run recorded a step in time"
    assert not (found / "summary.json").exists()
    return found
