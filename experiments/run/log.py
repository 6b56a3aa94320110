"""The run's log file: what Ray, MLflow and the workers write to stderr during a run (start-up
warnings, "Creating initial MLflow database tables", actors' log lines) goes to
``<run folder>/run.log`` instead of the user's terminal, which keeps only kernelswarm's own view.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

LOG_NAME = "run.log"


@contextlib.contextmanager
def stderr_to(path: Path) -> Iterator[Path]:
    """Send file descriptor 2 and ``sys.stderr`` to ``path`` (appended) while the block runs.

    The descriptor is redirected, not only the Python object, because Ray forwards its workers'
    output from threads and native code writes to fd 2 directly.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved_fd = os.dup(2)
    saved_object = sys.stderr
    with open(path, "a", buffering=1) as log:
        os.dup2(log.fileno(), 2)
        sys.stderr = log
        try:
            yield path
        finally:
            log.flush()
            sys.stderr = saved_object
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
