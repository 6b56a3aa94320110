"""Limits the runner puts on itself before it imports torch, and its tie to the judge."""

from __future__ import annotations

import os
import resource
import select
import threading

FILE_SIZE_LIMIT_BYTES = 64 * 1024 * 1024  # the log is the only file the runner writes


def apply_limits(memory_limit_mb: int | None) -> None:
    """No core dumps, bounded file writes, and an address-space cap when one is configured.

    Applied first thing: before torch, the task or any kernel is loaded.
    """
    limits = [(resource.RLIMIT_CORE, 0), (resource.RLIMIT_FSIZE, FILE_SIZE_LIMIT_BYTES)]
    if memory_limit_mb is not None:
        limits.append((resource.RLIMIT_AS, memory_limit_mb * 1024 * 1024))
    for kind, value in limits:
        _, hard = resource.getrlimit(kind)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(kind, (value, value))


def exit_with_parent(request_fd: int, poll_s: float = 1.0) -> None:
    """Exit when the judge that started this process is gone.

    An idle runner notices the end of its request pipe, but one stuck in a kernel's endless loop
    would not; a daemon thread watches for it (it runs while the kernel does, since ctypes
    releases the GIL during the call): the request pipe hung up (every writer, i.e. the judge,
    closed it or died), or the parent changed (where the runner is the judge's own child; under
    a namespace launcher the parent is the launcher). The judge kills the whole process group
    anyway; this covers a judge that was itself killed.
    """
    parent = os.getppid()
    watcher = select.poll()
    watcher.register(request_fd, select.POLLHUP)

    def watch() -> None:
        while os.getppid() == parent:
            if any(event & (select.POLLHUP | select.POLLERR | select.POLLNVAL)
                   for _, event in watcher.poll(poll_s * 1000)):
                os._exit(3)
        os._exit(3)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
