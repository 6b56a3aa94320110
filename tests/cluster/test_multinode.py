"""`kernelswarm run --address` joins an existing two-node Ray cluster and uses both nodes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

_SCRIPT = textwrap.dedent("""
    import json, sys
    from ray.cluster_utils import Cluster
    from kernelswarm.experiments.commands.cli import main

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    out, cache = sys.argv[1], sys.argv[2]
    code = main(["run", "--address", cluster.address,
                 "--set", f'run.out_dir="{out}/runs"', "--set", "run.name=twonode",
                 "--set", "search.lineages=2", "--set", "search.candidates_per_lineage=2",
                 "--set", f'tracking.mlflow_uri="sqlite:///{out}/mlflow.db"',
                 "--set", f'evaluator.cache_dir="{cache}"', "--set", "evaluator.workers=2",
                 "--set", "timing.budget_s=0.05", "--set", "timing.min_repeats=3"])
    print("RESULT", json.dumps({"code": code}))
    cluster.shutdown()
""")


def test_run_joins_a_two_node_cluster_by_address(tmp_path, compile_cache):
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path), str(compile_cache)],
                          capture_output=True, text=True, timeout=420, cwd=tmp_path)
    output = proc.stdout + proc.stderr
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")), None)
    assert line is not None, output[-3000:]
    assert json.loads(line.split(" ", 1)[1])["code"] == 0, output[-3000:]
    # Two workers of one CPU each on two one-CPU nodes: the run only finishes if both nodes work.
    assert "2 CPUs" in output and "2 evaluation worker(s)" in output
    summary = json.loads(next((tmp_path / "runs").glob("twonode-*/summary.json")).read_text())
    assert summary["best"] is not None
    assert all(not lineage["error"] for lineage in summary["lineages"])
