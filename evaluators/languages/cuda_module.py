"""Loaded CUDA modules and the ``fn`` a task's ``launch_cuda`` calls (sandbox side only).

A ``CudaModule`` is a cubin (from evaluators/languages/nvrtc.py) loaded into PyTorch's CUDA context through
the driver API (``cuda.bindings``). ``CudaFunction`` is one of its ``extern "C" __global__``
kernels as a Python callable with this calling convention::

    fn(grid, block, *args, shared_mem=0)

- launches on PyTorch's *current* stream (so it follows ``torch.cuda.stream(...)`` and CUDA-graph
  capture, and the timing's events and synchronisation see it);
- ``grid``/``block``: an int or a tuple of up to three ints;
- ``args``: a ``torch.Tensor`` passes its data pointer; an ``int``, ``float`` or ``bool`` is
  converted to the size the kernel declares for that parameter (``int``/``long long``,
  ``float``/``double``, ``bool``); ``bytes`` of exactly the parameter's size pass a struct;
- ``shared_mem``: dynamic shared memory in bytes; above 48 KB the kernel's limit is raised first;
- a failed launch raises ``CudaDriverError`` naming the driver's error and the geometry.

``fn.kernel(name)`` returns another kernel of the same module, ``fn.knobs`` the knob values the
module was built with, ``fn.name`` the kernel's name, ``fn.device`` the GPU's figures (SM count,
L2 bytes, per-SM limits: evaluators/languages/cuda_device.py) for launchers that size grids to the machine. A dispatch kernel's module (its header
holds the table, search/dispatch.py) gives the launcher a ``RouteFunction`` per launched shape:
the same calls, answered by that route's copies of the kernels and its knob values.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...search import DispatchTable, route_symbol
from .base import LoadError
from .cuda_device import DeviceFigures, device_figures
from .cuda_errors import CudaDriverError
from .nvrtc import read_artifact

_SHARED_DEFAULT_LIMIT = 48 * 1024
_MAX_LAUNCH_RECORDS = 32
_INT_TYPES = {1: ctypes.c_int8, 2: ctypes.c_int16, 4: ctypes.c_int32, 8: ctypes.c_int64}
_UINT_TYPES = {1: ctypes.c_uint8, 2: ctypes.c_uint16, 4: ctypes.c_uint32, 8: ctypes.c_uint64}
_FLOAT_TYPES = {4: ctypes.c_float, 8: ctypes.c_double}


def _driver() -> Any:
    from cuda.bindings import driver

    return driver


def check(result: Any, what: str) -> Any:
    """The values of a ``cuda.bindings`` call, or ``CudaDriverError`` for its error code."""
    err, *values = result if isinstance(result, tuple) else (result,)
    code = int(err)
    if code != 0:
        _, name = _driver().cuGetErrorName(err)
        raise CudaDriverError(code, name.decode() if isinstance(name, bytes) else str(name), what)
    return values[0] if len(values) == 1 else tuple(values)


def _ensure_context() -> int:
    """Make PyTorch's (primary) context current on this thread; return the device ordinal."""
    import torch

    torch.cuda.init()
    device = torch.cuda.current_device()
    torch.cuda.synchronize(device)  # creates the context if nothing has yet
    driver = _driver()
    check(driver.cuInit(0), "initialising the driver")
    if int(check(driver.cuCtxGetCurrent(), "reading the current context")) == 0:
        handle = check(driver.cuDeviceGet(device), "getting the device")
        context = check(driver.cuDevicePrimaryCtxRetain(handle), "retaining the context")
        check(driver.cuCtxSetCurrent(context), "making the context current")
    return device


def _dim3(value: Any, what: str) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, int) else tuple(value)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, int) and not isinstance(d, bool)
                                         and d >= 1 for d in dims):
        raise ValueError(f"{what} must be a positive int or a tuple of 1 to 3 positive ints, "
                         f"got {value!r}")
    return (*dims, *(1,) * (3 - len(dims)))  # type: ignore[return-value]


def _argument(value: Any, size: int, index: int, kernel: str) -> ctypes._SimpleCData | ctypes.Array:
    """``value`` as C storage of ``size`` bytes for parameter ``index``; ``TypeError`` if not."""
    if hasattr(value, "data_ptr") and callable(value.data_ptr):
        if size != 8:
            raise TypeError(f"`{kernel}` parameter {index} is {size} bytes, but a tensor passes "
                            f"an 8-byte pointer")
        return ctypes.c_uint64(value.data_ptr())
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, int):
        if size not in _INT_TYPES or not -(1 << (8 * size - 1)) <= value < (1 << (8 * size)):
            raise TypeError(f"`{kernel}` parameter {index} is {size} bytes; the int {value} does "
                            f"not fit it")
        kind = _INT_TYPES[size] if value < (1 << (8 * size - 1)) else _UINT_TYPES[size]
        return kind(value)
    if isinstance(value, float):
        if size not in _FLOAT_TYPES:
            raise TypeError(f"`{kernel}` parameter {index} is {size} bytes; a float passes as "
                            f"float (4) or double (8); pass half-precision scalars as float")
        return _FLOAT_TYPES[size](value)
    if isinstance(value, (bytes, bytearray)) and len(value) == size:
        return ctypes.create_string_buffer(bytes(value), size)
    raise TypeError(f"`{kernel}` parameter {index} ({size} bytes): cannot pass "
                    f"{type(value).__name__}; pass a tensor, int, float, bool or {size} bytes")


class CudaFunction:
    """One kernel of a loaded module, callable as ``fn(grid, block, *args, shared_mem=0)``."""

    def __init__(self, module: CudaModule, name: str, handle: Any) -> None:
        self.module = module
        self.name = name
        self.handle = handle
        self._sizes = self._parameter_sizes()
        self._shared_limit = _SHARED_DEFAULT_LIMIT

    @property
    def knobs(self) -> Mapping[str, Any]:
        return self.module.knobs

    @property
    def device(self) -> DeviceFigures:
        """The GPU's figures (SM count, L2 size, per-SM limits), read from its driver."""
        return device_figures(self.module.device)

    @functools.cached_property  # launchers read it on every call
    def registers(self) -> int:
        """Registers per thread of this kernel (for occupancy: ``device.blocks_per_sm``)."""
        kind = _driver().CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS
        return int(check(_driver().cuFuncGetAttribute(kind, self.handle),
                         f"reading `{self.name}`'s registers"))

    def kernel(self, name: str) -> CudaFunction:
        """Another ``extern "C" __global__`` kernel of the same source."""
        return self.module.function(name)

    def _parameter_sizes(self) -> list[int]:
        driver, sizes = _driver(), []
        while True:
            err, _, size = driver.cuFuncGetParamInfo(self.handle, len(sizes))
            if int(err) != 0:  # past the last parameter
                return sizes
            sizes.append(int(size))

    def __call__(self, grid: Any, block: Any, *args: Any, shared_mem: int = 0) -> None:
        import torch

        grid3, block3 = _dim3(grid, "grid"), _dim3(block, "block")
        if len(args) != len(self._sizes):
            raise TypeError(f"kernel `{self.name}` takes {len(self._sizes)} parameters, the "
                            f"launcher passed {len(args)}")
        storage = [_argument(a, s, i, self.name) for i, (a, s) in enumerate(zip(args, self._sizes, strict=True))]
        pointers = (ctypes.c_void_p * max(len(storage), 1))(
            *[ctypes.addressof(s) for s in storage])
        if shared_mem > self._shared_limit:
            check(_driver().cuFuncSetAttribute(
                self.handle,
                _driver().CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                shared_mem), f"raising `{self.name}`'s dynamic shared memory to {shared_mem} B")
            self._shared_limit = shared_mem
        stream = torch.cuda.current_stream().cuda_stream
        result = _driver().cuLaunchKernel(self.handle, *grid3, *block3, shared_mem, stream,
                                          ctypes.addressof(pointers), 0)
        if int(result[0]) != 0:
            check(result, f"launching `{self.name}` with grid {grid3}, block {block3}, "
                          f"shared_mem {shared_mem}")
        self.module.record_launch(self.name, grid3, block3, shared_mem)


class RouteFunction:
    """One route of a dispatch kernel (search/dispatch.py), callable like ``CudaFunction``:
    ``fn.kernel(name)`` finds that route's copy of ``name`` and ``fn.knobs`` are its values."""

    def __init__(self, module: CudaModule, entry: str, index: int) -> None:
        assert module.dispatch is not None
        self.module = module
        self.entry = entry
        self.index = index
        self.knobs: Mapping[str, Any] = module.dispatch.routes[index].knob_values
        self.function = module.function(route_symbol(entry, index))

    @property
    def name(self) -> str:
        return self.function.name

    @property
    def device(self) -> DeviceFigures:
        return self.function.device

    @property
    def registers(self) -> int:
        return self.function.registers

    def kernel(self, name: str) -> CudaFunction:
        """This route's copy of the kernel ``name``."""
        return self.module.function(route_symbol(name, self.index))

    def __call__(self, grid: Any, block: Any, *args: Any, shared_mem: int = 0) -> None:
        self.function(grid, block, *args, shared_mem=shared_mem)


class CudaModule:
    """A cubin loaded in the current context, its kernels, and what they were launched with."""

    def __init__(self, handle: Any, header: Mapping[str, Any], device: int) -> None:
        self.handle = handle
        self.header = header
        self.device = device
        self.knobs: Mapping[str, Any] = dict(header.get("knobs", {}))
        table = header.get("dispatch")
        self.dispatch = DispatchTable.from_json(table) if table is not None else None
        self._routes: dict[tuple[str, int], RouteFunction] = {}
        self._chosen: dict[tuple[str, tuple[tuple[str, Any], ...]], RouteFunction] = {}
        self._functions: dict[str, CudaFunction] = {}
        self._launches: dict[tuple[str, tuple[int, ...], tuple[int, ...], int], int] = {}
        self._loaded = True

    @classmethod
    def load(cls, artifact: Path) -> CudaModule:
        """Load ``artifact``; ``LoadError`` when it is unreadable or built for another GPU."""
        try:
            header, cubin = read_artifact(artifact)
        except (OSError, ValueError) as exc:
            raise LoadError(f"cannot read the built kernel: {exc}") from exc
        import torch

        device = _ensure_context()
        major, minor = torch.cuda.get_device_capability(device)
        built = str(header.get("arch", ""))
        if built.removeprefix("sm_").rstrip("af") != f"{major}{minor}":
            raise LoadError(f"the kernel was built for {built}, but this GPU is sm_{major}{minor}: "
                            f"set EvaluatorSettings.cuda_arch to sm_{major}{minor}")
        try:
            handle = check(_driver().cuModuleLoadData(cubin), "loading the module")
        except CudaDriverError as exc:
            raise LoadError(f"the CUDA driver refused the module: {exc}") from exc
        return cls(handle, header, device)

    def function(self, name: str) -> CudaFunction:
        """The kernel ``name``; ``LoadError`` naming the kernels there when it is missing."""
        if name not in self._functions:
            try:
                handle = check(_driver().cuModuleGetFunction(self.handle, name.encode()),
                               f"finding kernel `{name}`")
            except CudaDriverError:
                known = ", ".join(sorted(self.header.get("kernels", {}))) or "none"
                raise LoadError(f"the module has no kernel `{name}` (kernels: {known}); declare "
                                f"it `extern \"C\" __global__`") from None
            self._functions[name] = CudaFunction(self, name, handle)
        return self._functions[name]

    def route(self, entry: str, index: int) -> RouteFunction:
        """Route ``index`` of a dispatch module, as the launcher sees it: its entry kernel, its
        other kernels by their plain names and its knob values."""
        if self.dispatch is None or not 0 <= index < len(self.dispatch.routes):
            raise LoadError(f"the module has no dispatch route {index}")
        key = (entry, index)
        if key not in self._routes:
            self._routes[key] = RouteFunction(self, entry, index)
        return self._routes[key]

    def route_for(self, entry: str, shape: Mapping[str, Any]) -> RouteFunction:
        """The route a launch of ``shape`` takes (the table's rule, remembered per shape: the
        timing launches the same shape many times)."""
        assert self.dispatch is not None
        key = (entry, tuple(sorted(shape.items())))
        if key not in self._chosen:
            self._chosen[key] = self.route(entry, self.dispatch.select(shape))
        return self._chosen[key]

    def record_launch(self, name: str, grid: tuple[int, ...], block: tuple[int, ...],
                      shared_mem: int) -> None:
        key = (name, grid, block, shared_mem)
        if key in self._launches or len(self._launches) < _MAX_LAUNCH_RECORDS:
            self._launches[key] = self._launches.get(key, 0) + 1

    def resources(self) -> dict[str, Any]:
        """Per launched kernel: registers, shared/local/constant memory, spills, occupancy; and
        the distinct launch geometries used."""
        kernels = {name: self._attributes(fn) for name, fn in self._functions.items()}
        launches = [{"kernel": name, "grid": list(grid), "block": list(block),
                     "shared_mem": shared, "calls": calls}
                    for (name, grid, block, shared), calls in self._launches.items()]
        for launch in launches:
            fn = self._functions[launch["kernel"]]
            launch["occupancy"] = self._occupancy(fn, launch["block"], launch["shared_mem"])
        return {"arch": self.header.get("arch"), "nvrtc": self.header.get("nvrtc"),
                "kernels": kernels, "launches": launches}

    def _attributes(self, fn: CudaFunction) -> dict[str, int]:
        driver = _driver()
        names = {"registers": "NUM_REGS", "static_shared_bytes": "SHARED_SIZE_BYTES",
                 "local_bytes_per_thread": "LOCAL_SIZE_BYTES", "const_bytes": "CONST_SIZE_BYTES",
                 "max_threads_per_block": "MAX_THREADS_PER_BLOCK"}
        found: dict[str, int] = {}
        for key, attribute in names.items():
            kind = getattr(driver.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{attribute}")
            err, value = driver.cuFuncGetAttribute(kind, fn.handle)
            if int(err) == 0:
                found[key] = int(value)
        ptxas = self.header.get("kernels", {}).get(fn.name, {})  # spills and stack frame
        found.update({k: int(v) for k, v in ptxas.items() if k not in found})
        return found

    def _occupancy(self, fn: CudaFunction, block: Sequence[int], shared_mem: int) -> float | None:
        """Theoretical occupancy: resident warps per multiprocessor over the maximum."""
        import torch

        threads = block[0] * block[1] * block[2]
        err, blocks = _driver().cuOccupancyMaxActiveBlocksPerMultiprocessor(
            fn.handle, threads, shared_mem)
        if int(err) != 0:
            return None
        limit = torch.cuda.get_device_properties(self.device).max_threads_per_multi_processor
        return round(int(blocks) * threads / limit, 4)

    def unload(self) -> None:
        """Release the module; errors are ignored (the context may be dead after a crash)."""
        if self._loaded:
            self._loaded = False
            try:
                _driver().cuModuleUnload(self.handle)
            except Exception:  # noqa: BLE001 - a sticky error makes every call fail
                pass
