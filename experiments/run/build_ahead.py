"""The starts' device code, built while the run starts up.

A Triton kernel's device code is built ahead of its evaluation by whoever builds the candidate
(evaluators/judge/prebuild.py): a lineage's compile pool for its candidates. The starting
kernels are judged before any lineage runs, by a judge that only looks their build up, so
their kernels compiled inside the runner, on the GPU's time: 9.7 s for merge_attn_states_lse's
Triton start on an H200 (its 25 shape versions), against 4 s for the CUDA start beside it. And
the kernel a Triton lineage judges first (``search.compile_start``: compile's own kernel) was
built by that lineage once the search had begun: 26 s before its first verdict on
fused_add_rmsnorm.

``build_starts_ahead`` builds both on a thread of the run's own process, as soon as the run is
prepared: in the seconds Ray starts, the workers calibrate and the first language's start is
judged. The build is the lineages' own (a sandboxed process with no device, into the shared
compile cache), so the judge and the lineages find it there; a build not done in time costs
nothing but its CPU, as the judge and the lineage then build what they need as before.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from kernelswarm.evaluators import EvaluatorSettings
from kernelswarm.search import Candidate

if TYPE_CHECKING:  # imported where a build is made: a run with none imports no builder
    from kernelswarm.evaluators import SandboxBuilder

BUILD_AHEAD_LIMIT_S = 600.0  # a build still running then is stopped (the run has long started)


def build_starts_ahead(task_path: Path, starts: Iterable[Candidate],
                       first_candidates: Mapping[str, tuple[Candidate, ...]],
                       settings: EvaluatorSettings) -> list[threading.Thread]:
    """Threads (started, daemons) that build ahead each start in a language whose kernels are
    built ahead (Triton on a GPU), and the kernels its lineages judge first; none for the
    others. A build stops at ``BUILD_AHEAD_LIMIT_S``; the run does not wait for them (a build
    still running as the run's process ends goes on to its end, into the cache: the starts
    are the task's own code and compile's), a test may join them."""
    from kernelswarm.evaluators import SandboxBuilder

    deadline = time.time() + BUILD_AHEAD_LIMIT_S
    threads = []
    for start in starts:
        if not settings.builds_ahead(start.language):
            continue
        for candidate in (start, *first_candidates.get(start.language, ())):
            builder = SandboxBuilder(task_path, start.language, settings)
            builder.until(deadline)
            thread = threading.Thread(target=_build, args=(builder, candidate), daemon=True,
                                      name=f"build-ahead-{candidate.id}")
            thread.start()
            threads.append(thread)
    return threads


def _build(builder: SandboxBuilder, candidate: Candidate) -> None:
    try:
        builder.compile(candidate)
    except Exception:  # noqa: BLE001 - the judge builds it again and reports what fails
        pass
