"""Ray started on a thread while the run is prepared, instead of after.

A local instance takes 4 to 5 s to start on 2 cores, and most of it is waiting: its processes
(GCS, the raylet, the agents) start one after another, one core busy. The driver's own start
(importing Ray, torch and the task, checking the configuration, making the run folder: 3 to 4 s,
one core) ran before it; side by side they use both cores.

The thread that calls ``ray.init`` lives until Ray is shut down: Ray's processes are started to
die with the thread that started them, so it is that thread that shuts Ray down. What is written
to stderr meanwhile (Ray's start-up warnings) is held in a temporary file and handed over
(``Started.held``) for the run's log, which takes Ray's noise during the run.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kernelswarm.cluster import ClusterInfo


@dataclass(frozen=True)
class Started:
    info: ClusterInfo
    held: str  # what was written to stderr while Ray started


class RayStart:
    """``connect(address, num_cpus)`` run on a thread of its own from construction on.

    Call ``ready`` (the connection, or ``connect``'s error raised) and then ``stop`` (Ray shut
    down, if this started a local instance), or only ``stop``; both from the thread that made
    this, which gets stderr back at the first of them.
    """

    def __init__(self, address: str | None, num_cpus: int | None) -> None:
        self._address, self._num_cpus = address, num_cpus
        self._info: ClusterInfo | None = None
        self._error: BaseException | None = None
        self._started: Started | None = None
        self._connected = threading.Event()
        self._released = threading.Event()
        self._held: Any = None
        self._saved_fd: int | None = None
        self._hold_stderr()
        if threading.current_thread() is threading.main_thread():
            # What ray.init does on the main thread only: SIGTERM exits through finally blocks
            # and atexit, so that Ray's processes are shut down
            signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))
        # a daemon: an exit that never called stop() is not held up by it (Ray's own atexit
        # shuts a local instance down from the main thread)
        self._thread = threading.Thread(target=self._hold, name="ray-start", daemon=True)
        self._thread.start()

    def _hold(self) -> None:
        try:
            from kernelswarm.cluster import connect, disconnect

            self._info = connect(self._address, self._num_cpus)
        except BaseException as exc:  # noqa: BLE001 - raised again by ready()
            self._error = exc
            return
        finally:
            self._connected.set()
        self._released.wait()
        disconnect(self._info)

    def ready(self) -> Started:
        """The connection once made, with what stderr got meanwhile (the same each call);
        ``connect``'s error."""
        self._connected.wait()
        held = self._give_stderr_back()
        if self._error is not None:
            raise self._error
        assert self._info is not None
        if self._started is None:
            self._started = Started(self._info, held)
        return self._started

    def stop(self) -> None:
        """Shut a local instance this started down (waiting for its start first)."""
        self._give_stderr_back()
        self._released.set()
        self._thread.join()

    # The descriptor only: sys.stderr writes to it, and so do the handlers Ray's logging makes
    # of sys.stderr while it starts, wherever descriptor 2 leads later (run.log, during the run).
    def _hold_stderr(self) -> None:
        sys.stderr.flush()
        self._held = tempfile.TemporaryFile("w+")
        self._saved_fd = os.dup(2)
        os.dup2(self._held.fileno(), 2)

    def _give_stderr_back(self) -> str:
        if self._saved_fd is None:
            return ""
        sys.stderr.flush()
        os.dup2(self._saved_fd, 2)
        os.close(self._saved_fd)
        self._saved_fd = None
        self._held.seek(0)
        held = self._held.read()
        self._held.close()
        return held
