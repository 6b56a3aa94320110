"""What the judge and its runner agree on: request names, seeds, and tensor layouts.

Imported by both sides (evaluators/judge/ and evaluators/runner/); pure and torch-free, so that
the runner can import it before its resource limits are in place. The exchange itself is
described in evaluators/judge/runner_process.py (requests and replies) and
evaluators/measure/shared_memory.py (where tensors travel).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

RUNNER_MODULE = "kernelswarm.evaluators.runner"

# The seed of the values refilled into a checked call's input buffers: never a checked seed.
REFILL_SEED = 7919
# Which poison a call's outputs get before the call (evaluators/correctness.py).
FIRST_POISON = "first"
SECOND_POISON = "second"
# Copies of a timed problem on the CPU, each refreshed before it is used again. The last
# output of every copy used comes back with the batch's reply and is checked by the judge, so
# at least this many timed calls of a batch did the work (GPU: the last ``GPU_RETURNED_COPIES``
# copies used).
CPU_TIMING_COPIES = 8
GPU_RETURNED_COPIES = 2
# Element alignment of tensors in the shared arena (a cache line).
ALIGN = 64
# A process hands its allocator's cached free device memory back to the device (for the other
# process of the evaluation) only when it held at least this much: below it, the room is not
# needed, and freeing then allocating again costs every shape of a small problem a round of
# cudaFree/cudaMalloc (on an H200 that made the timing phase's warm-up 2-3 s an evaluation).
RELEASE_ABOVE_BYTES = 1 << 30

# The folder of a runner's scratch that holds its JIT's compile cache, seeded by the judge
# with what was built ahead for the candidate.
JIT_CACHE = "triton"

# The frame a runner sends, ahead of its ``ready``, as the starting kernel's warm-up calls begin
WARMING = "warming"

CANDIDATE = "candidate"
START = "start"
KERNELS = (CANDIDATE, START)


def release_due(free_cached_bytes: int) -> bool:
    """Whether a process whose allocator caches ``free_cached_bytes`` of free device memory
    hands it back to the device (``RELEASE_ABOVE_BYTES``)."""
    return free_cached_bytes >= RELEASE_ABOVE_BYTES


def timing_seed(secret: int, index: int) -> int:
    """The seed of the ``index``-th refresh of a timed input, for one evaluation's ``secret``.

    The runner learns ``secret`` only when timing starts; the judge re-derives the inputs of any
    copy from the refresh index the runner reports for it.
    """
    return (secret + 0x9E3779B1 * (index + 1)) % (1 << 62)


@dataclass(frozen=True)
class TensorSpec:
    """Where one tensor lies in the arena: byte offset, dtype name and shape."""

    offset: int
    dtype: str
    shape: tuple[int, ...]
    itemsize: int

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize

    def as_json(self) -> dict[str, Any]:
        return {"offset": self.offset, "dtype": self.dtype, "shape": list(self.shape),
                "itemsize": self.itemsize}

    @staticmethod
    def of_json(raw: Mapping[str, Any]) -> TensorSpec:
        return TensorSpec(int(raw["offset"]), str(raw["dtype"]),
                          tuple(int(d) for d in raw["shape"]), int(raw["itemsize"]))


def layout(described: Sequence[tuple[str, Sequence[int], int]], start: int = 0
           ) -> tuple[list[TensorSpec], int]:
    """Specs for tensors described as (dtype name, shape, item size), packed from ``start``
    with ``ALIGN``-byte alignment; and the end offset."""
    specs, offset = [], start
    for dtype, shape, itemsize in described:
        offset = -(-offset // ALIGN) * ALIGN
        spec = TensorSpec(offset, dtype, tuple(int(d) for d in shape), int(itemsize))
        specs.append(spec)
        offset += spec.nbytes
    return specs, offset
