"""Calls that survive a restart of the actor they go to (its process or node lost): Ray
restarts the actor (``max_restarts``); the call is sent again once it is back."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import ray
from ray.exceptions import RayActorError

# How long a caller waits for a restarted actor (Ray restarts it on a live node; a node lost
# with it takes seconds to be noticed) before the call's error is raised.
RESTART_WAIT_S = 120.0
RETRY_PAUSE_S = 0.5


def call(method: Any, *args: Any, wait_s: float = RESTART_WAIT_S,
         on_retry: Callable[[], None] | None = None, **kwargs: Any) -> Any:
    """``ray.get(method.remote(*args, **kwargs))``, sent again while its actor is being
    restarted.

    A call that failed because the actor died may or may not have run: only calls that are
    safe to repeat (every one the tracker and the dispatcher serve) go through here.
    ``on_retry`` runs before each retry (e.g. to renew what the dead actor held).
    """
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return ray.get(method.remote(*args, **kwargs))
        except RayActorError as exc:
            # A constructor that failed on a restart fails again: the actor is gone for good.
            if exc.actor_init_failed or time.monotonic() > deadline:
                raise
        time.sleep(RETRY_PAUSE_S)
        if on_retry is not None:
            try:
                on_retry()
            except RayActorError:
                continue  # still restarting: the next retry renews again
