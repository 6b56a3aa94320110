"""The shared memory of one GPU evaluation, on the GPU: tensors never cross host memory.

The judge allocates one block of device memory with the CUDA driver's virtual memory API
(``cuMemCreate``), exports it as a POSIX file descriptor and passes that descriptor to exactly
one runner, as it passes the host arena's (evaluators/measure/shared_memory.py) on the CPU. The runner
imports the descriptor and maps the same memory into its own CUDA context. Inputs go in and
outputs come back by device-to-device copies, about a thousand times faster than through page-
locked host memory, and the judge compares what came back on the device.

Why this API: a legacy CUDA IPC handle (``cudaIpcGetMemHandle``, which ``torch.multiprocessing``
uses) cannot be opened across PID namespaces, and every runner is pid 1 of its own (evaluators/
isolation.py); a file descriptor passed by the judge needs no namespace in common. It also
exports exactly this block: the judge's references and other tensors live in PyTorch's caching
allocator, in memory the runner never maps.

Ordering: the two processes have CUDA contexts of their own, so a write of one is visible to the
other once the writer has synchronised. ``settle`` does that: the judge settles before each
request, the runner before each reply. ``read`` copies the bytes out first, so that what the judge
compares is a snapshot the runner can no longer change.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from .shared_memory import BaseArena

DEVICE_ARENA = "device"
HOST_ARENA = "host"


class DeviceArenaUnavailable(RuntimeError):
    """The driver cannot share device memory by file descriptor here (the judge falls back to
    the page-locked host arena, and each evaluation's metrics say so)."""


def _driver() -> Any:
    from cuda.bindings import driver

    return driver


def _check(result: Any, what: str) -> Any:
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise DeviceArenaUnavailable(f"{what} failed: CUDA driver error {int(err)} "
                                     f"({getattr(err, 'name', err)})")
    return values[0] if len(values) == 1 else tuple(values)


def _current_device(device: str) -> int:
    """The ordinal of ``device`` with PyTorch's (primary) context current on this thread."""
    torch.cuda.init()
    ordinal = torch.device(device).index
    ordinal = torch.cuda.current_device() if ordinal is None else ordinal
    torch.cuda.set_device(ordinal)
    torch.cuda.synchronize(ordinal)  # creates the context if nothing has yet
    return ordinal


def _properties(ordinal: int) -> Any:
    driver = _driver()
    prop = driver.CUmemAllocationProp()
    prop.type = driver.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = ordinal
    prop.requestedHandleTypes = \
        driver.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    return prop


class _CudaArrayView:
    """A raw device range as ``__cuda_array_interface__``: what ``torch.as_tensor`` wraps
    without a copy."""

    def __init__(self, address: int, size: int) -> None:
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1",
                                         "data": (address, False), "version": 3,
                                         "strides": None}


class DeviceArena(BaseArena):
    """One mapping of a shared device allocation; ``create`` in the judge, ``attach`` in the
    runner. ``fd`` is the descriptor that travels to the runner."""

    on_device = True
    kind = DEVICE_ARENA

    def __init__(self, fd: int, size: int, ordinal: int, handle: Any, address: int,
                 mapped: int) -> None:
        self.fd = fd
        self.size = size
        self.ordinal = ordinal
        self._handle = handle
        self._address = address
        self._mapped = mapped  # bytes reserved and mapped (``size`` rounded up)
        self._memory = torch.as_tensor(_CudaArrayView(address, size), device=f"cuda:{ordinal}")
        self._closed = False

    @property
    def pinned(self) -> bool:
        return True  # device memory: copies to and from the device are on the device

    def pin(self) -> bool:
        return True

    def describe(self) -> dict[str, Any]:
        """What the runner needs besides the descriptor to attach (the prepare request)."""
        return {**super().describe(), "mapped": self._mapped}

    @classmethod
    def create(cls, size: int, device: str) -> DeviceArena:
        """A new arena of ``size`` bytes on ``device``; ``DeviceArenaUnavailable`` where the
        driver cannot share memory by file descriptor."""
        try:
            ordinal = _current_device(device)
            driver = _driver()
        except Exception as exc:  # no CUDA build, no device, no driver bindings
            raise DeviceArenaUnavailable(f"no CUDA device and driver API here: "
                                         f"{type(exc).__name__}: {exc}") from None
        prop = _properties(ordinal)
        granularity = int(_check(driver.cuMemGetAllocationGranularity(
            prop, driver.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            "reading the allocation granularity"))
        mapped = -(-max(size, 1) // granularity) * granularity
        handle = _check(driver.cuMemCreate(mapped, prop, 0), f"allocating {mapped} bytes")
        undo: list[Callable[[], Any]] = [lambda: driver.cuMemRelease(handle)]
        try:
            fd = int(_check(driver.cuMemExportToShareableHandle(
                handle, driver.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0), "exporting the allocation as a file descriptor"))
            undo.append(lambda: os.close(fd))
            os.set_inheritable(fd, False)
            address = _map(handle, mapped, ordinal, undo)
            return cls(fd, max(size, 1), ordinal, handle, address, mapped)
        except BaseException:
            for step in reversed(undo):
                step()
            raise

    @classmethod
    def attach(cls, fd: int, size: int, mapped: int, device: str) -> DeviceArena:
        """The runner's mapping of the allocation behind ``fd`` (``size`` bytes used of
        ``mapped``)."""
        ordinal = _current_device(device)
        driver = _driver()
        handle = _check(driver.cuMemImportFromShareableHandle(
            fd, driver.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
            "importing the arena's descriptor")
        undo: list[Callable[[], Any]] = [lambda: driver.cuMemRelease(handle)]
        try:
            address = _map(handle, mapped, ordinal, undo)
        except BaseException:
            for step in reversed(undo):
                step()
            raise
        return cls(fd, size, ordinal, handle, address, mapped)

    def _span(self, offset: int, nbytes: int) -> torch.Tensor:
        return self._memory[offset:offset + nbytes]

    def _snapshot(self, data: torch.Tensor, device: str) -> torch.Tensor:
        return data.to(device, copy=True)

    def _staged(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` on this arena's device: the copy in is device-to-device."""
        source = tensor.detach()
        if source.device != self._memory.device:
            source = source.to(self._memory.device)
        return source

    def settle(self) -> None:
        """Finish this process's copies, so that the other process sees them."""
        torch.cuda.synchronize(self.ordinal)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        driver = _driver()
        try:
            torch.cuda.synchronize(self.ordinal)
        except Exception:  # a context the kernel broke: the process ends anyway
            pass
        self._memory = torch.empty(0, dtype=torch.uint8)
        for call in (lambda: driver.cuMemUnmap(self._address, self._mapped),
                     lambda: driver.cuMemAddressFree(self._address, self._mapped),
                     lambda: driver.cuMemRelease(self._handle)):
            try:
                call()
            except Exception:
                pass
        try:
            os.close(self.fd)
        except OSError:
            pass


def _map(handle: Any, mapped: int, ordinal: int, undo: list[Callable[[], Any]]) -> int:
    """Reserve an address range, map ``handle`` there and allow this device to read and write
    it; the steps to take back are appended to ``undo``."""
    driver = _driver()
    address = int(_check(driver.cuMemAddressReserve(mapped, 0, 0, 0), "reserving addresses"))
    undo.append(lambda: driver.cuMemAddressFree(address, mapped))
    _check(driver.cuMemMap(address, mapped, 0, handle, 0), "mapping the arena")
    undo.append(lambda: driver.cuMemUnmap(address, mapped))
    access = driver.CUmemAccessDesc()
    access.location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    access.location.id = ordinal
    access.flags = driver.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    _check(driver.cuMemSetAccess(address, mapped, [access], 1), "granting access to the arena")
    return address


ARENA_ENV = "KERNELSWARM_DEVICE_ARENA"  # "0": GPU evaluations use the page-locked host arena
_refused: dict[str, str] = {}


def evaluation_arena(size: int, device: str) -> BaseArena:
    """The arena of one runner of ``device``: on a GPU the device arena, unless
    ``KERNELSWARM_DEVICE_ARENA=0`` or the driver refuses (then, as on the CPU, the host arena,
    page-locked on a GPU). ``arena_refusal(device)`` says why a GPU got the host arena."""
    from .shared_memory import Arena

    on_gpu = device.startswith("cuda")
    if on_gpu and os.environ.get(ARENA_ENV) != "0" and device not in _refused:
        try:
            return DeviceArena.create(size, device)
        except DeviceArenaUnavailable as exc:
            _refused[device] = str(exc)
    return Arena.create(size, pin=on_gpu)


def arena_refusal(device: str) -> str:
    """Why runners of ``device`` exchange tensors through host memory ("" on the device)."""
    if not device.startswith("cuda"):
        return ""
    if os.environ.get(ARENA_ENV) == "0":
        return f"{ARENA_ENV}=0"
    return _refused.get(device, "")


def attach_arena(fd: int, described: Any, device: str) -> BaseArena:
    """The runner's side of the arena the judge described in its prepare request."""
    from .shared_memory import Arena

    if isinstance(described, dict) and described.get("kind") == DEVICE_ARENA:
        return DeviceArena.attach(fd, int(described["bytes"]), int(described["mapped"]), device)
    return Arena.attach(fd)
