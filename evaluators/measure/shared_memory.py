"""The shared memory of one evaluation: inputs to the runner, outputs and inputs back.

The judge creates an anonymous file (``memfd_create``) sized for the largest problem of its
task, seals it against shrinking and growing (so that a runner cannot truncate it under the
judge's mapping, which would kill the judge with SIGBUS), and passes its descriptor to exactly
one runner process, which serves exactly one candidate: an arena is never shared by two
candidates. Tensors lie at the byte offsets of ``protocol.TensorSpec``; reading one copies it out
first, so that what the judge compares is a snapshot the runner can no longer change.

``BaseArena`` is what the judge and the runner use of an arena, whichever memory it is in; it
checks every copy (the spec within the arena, the tensor of the spec's dtype and shape) once
for both kinds: ``Arena`` here, ``DeviceArena`` in device memory (evaluators/measure/device_arena.py).

On a GPU both sides page-lock their mapping (``pin``: ``cudaHostRegister``), so that every copy
between the arena and the device is one DMA transfer rather than the driver's staged copy of
pageable memory, several times slower on the largest shapes. Where the driver refuses, the
copies stay correct, only slower.
"""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
from abc import ABC, abstractmethod
from collections.abc import Sequence

import torch

from ..protocol import TensorSpec

_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


class ArenaError(Exception):
    """A tensor that does not fit the arena, or a spec that does not describe it."""


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ArenaError(f"unknown dtype {name!r}")
    return dtype


def spec_dtype(spec: TensorSpec) -> torch.dtype:
    return _dtype(spec.dtype)


def describe(tensors: Sequence[torch.Tensor]) -> list[tuple[str, tuple[int, ...], int]]:
    """(dtype name, shape, item size) of each tensor, for ``protocol.layout``."""
    return [(str(t.dtype).removeprefix("torch."), tuple(t.shape), t.element_size())
            for t in tensors]


def _matches(spec: TensorSpec, tensor: torch.Tensor) -> bool:
    return str(tensor.dtype).removeprefix("torch.") == spec.dtype \
        and tuple(tensor.shape) == spec.shape


class BaseArena(ABC):
    """One side's mapping of an arena: ``size`` bytes that the judge and exactly one runner
    share, tensors at the byte offsets of ``protocol.TensorSpec``; ``fd`` is the descriptor
    that travels to the runner.

    Every copy is checked here: a spec outside the arena, or a tensor whose dtype or shape is
    not the spec's, is ``ArenaError``. ``read`` returns a copy, a snapshot the other process can
    no longer change. A copy is visible to the other process once this one has called
    ``settle``. Not thread-safe: one judge thread or the runner uses it.
    """

    on_device: bool
    kind: str
    fd: int
    size: int

    @property
    @abstractmethod
    def pinned(self) -> bool:
        """Whether copies between the arena and a device are direct (one DMA transfer)."""

    @abstractmethod
    def pin(self) -> bool:
        """Make copies to and from the device direct where this memory can be; whether they
        are."""

    def describe(self) -> dict[str, object]:
        """What the runner needs besides the descriptor to attach (the prepare request)."""
        return {"kind": self.kind, "bytes": self.size}

    @abstractmethod
    def settle(self) -> None:
        """Finish this process's copies, so that the other process sees them."""

    @abstractmethod
    def close(self) -> None:
        """Release the mapping and the descriptor."""

    @abstractmethod
    def _span(self, offset: int, nbytes: int) -> torch.Tensor:
        """The arena's bytes ``[offset, offset + nbytes)`` as a uint8 tensor (no copy)."""

    @abstractmethod
    def _snapshot(self, data: torch.Tensor, device: str) -> torch.Tensor:
        """A copy of ``data`` (the arena's bytes) on ``device``."""

    def _staged(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` as it is copied in (where it already is: the copy reads any device)."""
        return tensor.detach()

    def _bytes(self, spec: TensorSpec) -> torch.Tensor:
        if spec.offset < 0 or spec.offset + spec.nbytes > self.size:
            raise ArenaError(f"a tensor of {spec.nbytes} bytes at offset {spec.offset} does not "
                             f"fit the arena of {self.size} bytes")
        return self._span(spec.offset, spec.nbytes)

    def write(self, spec: TensorSpec, tensor: torch.Tensor) -> None:
        """Copy ``tensor`` (any device) to ``spec``'s place; its dtype and shape must match (on
        the device no synchronisation: ``settle``)."""
        if not _matches(spec, tensor):
            raise ArenaError(f"a {tensor.dtype} tensor of shape {list(tensor.shape)} where "
                             f"{spec.dtype} {list(spec.shape)} was expected")
        if spec.nbytes == 0:
            return
        self._bytes(spec).copy_(self._staged(tensor).contiguous().reshape(-1).view(torch.uint8))

    def read(self, spec: TensorSpec, device: str = "cpu") -> torch.Tensor:
        """A copy of the tensor at ``spec``'s place, on ``device`` (the copy is the snapshot)."""
        dtype = spec_dtype(spec)
        if spec.nbytes == 0:
            return torch.empty(spec.shape, dtype=dtype, device=device)
        return self._snapshot(self._bytes(spec), device).view(dtype).reshape(spec.shape)

    def copy_into(self, spec: TensorSpec, tensor: torch.Tensor) -> None:
        """Copy the tensor at ``spec``'s place into ``tensor`` (any device; same dtype and
        shape), with no intermediate copy."""
        if not _matches(spec, tensor) or not tensor.is_contiguous():
            tensor.copy_(self.read(spec, str(tensor.device)))
            return
        if spec.nbytes:
            tensor.view(-1).view(torch.uint8).copy_(self._bytes(spec))


class Arena(BaseArena):
    """One mapping of the shared file; ``create`` in the judge, ``attach`` in the runner."""

    on_device = False
    kind = "host"

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.size = size
        self._map = mmap.mmap(fd, max(size, 1), mmap.MAP_SHARED,
                              mmap.PROT_READ | mmap.PROT_WRITE)
        self._pinned = 0  # the mapping's address while registered with the CUDA driver

    @property
    def pinned(self) -> bool:
        return bool(self._pinned)

    def pin(self) -> bool:
        """Page-lock the mapping for the CUDA driver (CUDA must be usable in this process);
        whether it is. Idempotent; ``close`` unregisters it."""
        if self._pinned:
            return True
        try:
            view = (ctypes.c_char * self.size).from_buffer(self._map)
            address = ctypes.addressof(view)
            del view  # the address stays valid as long as the mapping does
            if int(torch.cuda.cudart().cudaHostRegister(address, self.size, 0)) != 0:
                return False
        except Exception:  # no CUDA here, or the driver refused: copies stay pageable
            return False
        self._pinned = address
        return True

    def settle(self) -> None:
        """Host copies are done when they return: nothing to wait for."""

    @classmethod
    def create(cls, size: int, pin: bool = False) -> Arena:
        """A new arena of ``size`` bytes; ``pin``: page-locked for the CUDA driver where it can
        be (the judge's side of a GPU evaluation)."""
        fd = os.memfd_create("kernelswarm-arena", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, max(size, 1))
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
            arena = cls(fd, max(size, 1))
        except BaseException:
            os.close(fd)
            raise
        if pin:
            arena.pin()
        return arena

    @classmethod
    def attach(cls, fd: int) -> Arena:
        return cls(fd, os.fstat(fd).st_size)

    def _span(self, offset: int, nbytes: int) -> torch.Tensor:
        # a tensor copied in goes straight from its device into the mapping (no host temporary)
        return torch.frombuffer(self._map, dtype=torch.uint8, count=nbytes, offset=offset)

    def _snapshot(self, data: torch.Tensor, device: str) -> torch.Tensor:
        if device == "cpu":
            return data.clone()
        # One copy from the mapping to the device: the copy is the snapshot (a host clone first
        # would move every byte twice, which on a GPU's largest shapes costs seconds).
        copy = torch.empty(data.numel(), dtype=torch.uint8, device=device)
        copy.copy_(data)
        return copy

    def close(self) -> None:
        if self._pinned:
            try:
                torch.cuda.cudart().cudaHostUnregister(self._pinned)
            except Exception:
                pass
            self._pinned = 0
        try:
            self._map.close()
        except BufferError:  # a view still alive: the mapping goes with the process
            pass
        try:
            os.close(self.fd)
        except OSError:
            pass
