"""The shared memory of one evaluation: inputs to the runner, outputs and inputs back.

The judge creates an anonymous file (``memfd_create``) sized for the largest problem of its
task, seals it against shrinking and growing (so that a runner cannot truncate it under the
judge's mapping, which would kill the judge with SIGBUS), and passes its descriptor to exactly
one runner process, which serves exactly one candidate: an arena is never shared by two
candidates. Tensors lie at the byte offsets of ``protocol.TensorSpec``; reading one copies it out
first, so that what the judge compares is a snapshot the runner can no longer change.

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
from collections.abc import Sequence

import torch

from .protocol import TensorSpec

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


class Arena:
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

    def describe(self) -> dict[str, object]:
        """What the runner needs besides the descriptor to attach (the prepare request)."""
        return {"kind": self.kind, "bytes": self.size}

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

    def _bytes(self, spec: TensorSpec) -> torch.Tensor:
        if spec.offset < 0 or spec.offset + spec.nbytes > self.size:
            raise ArenaError(f"a tensor of {spec.nbytes} bytes at offset {spec.offset} does not "
                             f"fit the arena of {self.size} bytes")
        return torch.frombuffer(self._map, dtype=torch.uint8, count=spec.nbytes,
                                offset=spec.offset)

    def write(self, spec: TensorSpec, tensor: torch.Tensor) -> None:
        """Copy ``tensor`` (any device) to ``spec``'s place; its dtype and shape must match."""
        if str(tensor.dtype).removeprefix("torch.") != spec.dtype \
                or tuple(tensor.shape) != spec.shape:
            raise ArenaError(f"a {tensor.dtype} tensor of shape {list(tensor.shape)} where "
                             f"{spec.dtype} {list(spec.shape)} was expected")
        if spec.nbytes == 0:
            return
        # One copy, straight from the tensor's device into the mapping (no host temporary).
        self._bytes(spec).copy_(tensor.detach().contiguous().reshape(-1).view(torch.uint8))

    def read(self, spec: TensorSpec, device: str = "cpu") -> torch.Tensor:
        """A copy of the tensor at ``spec``'s place, on ``device``."""
        dtype = _dtype(spec.dtype)
        if spec.nbytes == 0:
            return torch.empty(spec.shape, dtype=dtype, device=device)
        if device == "cpu":
            return self._bytes(spec).clone().view(dtype).reshape(spec.shape)
        # One copy from the mapping to the device: the copy is the snapshot (a host clone first
        # would move every byte twice, which on a GPU's largest shapes costs seconds).
        data = torch.empty(spec.nbytes, dtype=torch.uint8, device=device)
        data.copy_(self._bytes(spec))
        return data.view(dtype).reshape(spec.shape)

    def copy_into(self, spec: TensorSpec, tensor: torch.Tensor) -> None:
        """Copy the tensor at ``spec``'s place into ``tensor`` (any device; same dtype and
        shape), with no intermediate copy."""
        if str(tensor.dtype).removeprefix("torch.") != spec.dtype \
                or tuple(tensor.shape) != spec.shape or not tensor.is_contiguous():
            tensor.copy_(self.read(spec, str(tensor.device)))
            return
        if spec.nbytes:
            tensor.view(-1).view(torch.uint8).copy_(self._bytes(spec))

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
