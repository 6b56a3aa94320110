"""A run's processes import what they use: a run starts a tracker and four lineage actors beside
its driver on a machine that may have two cores, and a library imported for nothing costs each
up to a second of CPU while the starting kernel is being judged. Read from ``sys.modules`` in a fresh
interpreter, not timed."""

from __future__ import annotations

import subprocess
import sys


def _loaded(code: str) -> set[str]:
    """The top-level packages loaded by ``code`` in a fresh interpreter."""
    probe = code + "\nimport sys\nprint(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=300, check=True)
    return set(proc.stdout.split())


def test_the_agents_roles_a_lineage_actor_unpickles_load_neither_parquet_nor_mlflow():
    loaded = _loaded("import kernelswarm.experiments.agent.roles")
    assert not loaded & {"pyarrow", "pandas", "mlflow"}, sorted(loaded)


def test_the_sinks_a_run_hands_its_tracker_load_no_pandas_until_a_run_is_read():
    """The driver builds the sinks before Ray starts; pandas (pyarrow.dataset's) is for
    reading a run back (the report, resume)."""
    loaded = _loaded("from kernelswarm.experiments.sinks import MLflowSink, ParquetSink")
    assert "pyarrow" in loaded and not loaded & {"pandas", "mlflow"}, sorted(loaded)
