"""One evaluation worker per GPU, never two on one: on a Ray node that declares 4 GPUs (Ray
assigns GPU ids by its resource accounting, with or without a physical GPU), a ``cuda`` run's
pool has one worker per GPU, each sees exactly its own GPU through ``CUDA_VISIBLE_DEVICES``, and
the sandbox a worker starts for candidate code inherits that one GPU.

It needs a cluster with GPUs, so it runs in a subprocess (this process may already hold the
session's Ray instance, which has none).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow

_SCRIPT = textwrap.dedent("""
    import json, os

    import ray
    from ray.cluster_utils import Cluster

    from kernelswarm.cluster.pool import EvalPool
    from kernelswarm.evaluators.environment import scrubbed_environment
    from kernelswarm.experiments.config import load_config
    from kernelswarm.experiments.run.prepare import worker_pool

    cluster = Cluster(initialize_head=True, connect=True,
                      head_node_args={"num_cpus": 4, "num_gpus": 4})
    config = load_config(None, ["evaluator.device=cuda", "evaluator.workers=auto"])
    count, resources = worker_pool(config, ray.cluster_resources().get("GPU", 0))
    pool = EvalPool(count, resources)

    def seen(self):
        return {"visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "ray_ids": [str(i) for i in ray.get_gpu_ids()],
                "sandbox": scrubbed_environment().get("CUDA_VISIBLE_DEVICES")}

    views = ray.get([w.__ray_call__.remote(seen) for w in pool.workers])
    pool.close()
    print("RESULT", json.dumps({"count": count, "views": views}))
    ray.shutdown()
    cluster.shutdown()
""")


def test_each_gpu_has_one_worker_and_each_worker_one_gpu(tmp_path):
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")), None)
    assert line is not None, (proc.stdout + proc.stderr)[-4000:]
    result = json.loads(line.split(" ", 1)[1])
    views = result["views"]
    assert result["count"] == 4 and len(views) == 4
    for view in views:
        # One GPU each, the one Ray assigned, and candidate code sees that one only.
        assert len(view["ray_ids"]) == 1, view
        assert view["visible"] == view["sandbox"] == view["ray_ids"][0], view
    assert sorted(v["visible"] for v in views) == ["0", "1", "2", "3"]
