"""Triton kernels compiled ahead of their first call, for a named GPU, on a machine's CPU.

Triton compiles a ``@triton.jit`` kernel at its first call for each specialisation (argument
types, constexpr values, which integers are 1 or multiples of 16, which pointers are 16-byte
aligned), into its file cache (``TRITON_CACHE_DIR``). A runner that finds the entry there
loads it instead of compiling: what the GPU would otherwise wait for (seconds a candidate,
ptxas and a C compiler among them) is done here, beforehand, by a process with no device.

How: Triton's active driver is replaced by one that names the target (``cuda``, the compute
capability, warps of 32) and no device; every kernel launch becomes a compile-only warm-up
(``JITFunction.run(..., warmup=True)``; an autotuned kernel compiles each of its configs); and
the task's launcher runs the candidate's entry point on every shape the judge will call it on,
with tensors on PyTorch's ``meta`` device (their layout without memory: a pointer's alignment
is that of an allocation, as on the GPU), so the specialisations are those of the real calls
and the cache keys match. Each compiled kernel's launcher (a small C module Triton builds with
the system compiler) is built too where the CUDA driver library is installed.

Everything here runs candidate code (the module and its entry point): only in the sandboxed
build process of evaluators/runner/prebuild.py, never in the judge.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

WARP_SIZE = 32  # every NVIDIA target Triton supports


@dataclass
class AheadOfTime:
    """What one ahead-of-time compile did: kernels compiled, launchers built, shapes whose
    calls could not be compiled (with why), and the seconds spent."""

    launchers: int = 0
    shapes: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    launcher_error: str = ""
    seconds: float = 0.0
    hashes: list[str] = field(default_factory=list)  # Triton's cache keys of those compiled

    @property
    def kernels(self) -> int:
        return len(self.hashes)

    def as_json(self) -> dict[str, Any]:
        return {"kernels": self.kernels, "launchers": self.launchers, "shapes": self.shapes,
                "failed": dict(self.failed), "launcher_error": self.launcher_error,
                "seconds": round(self.seconds, 3), "hashes": list(self.hashes)}


class TargetDriver:
    """Triton's active driver for compiling only: it names the target and has no device."""

    def __init__(self, capability: int) -> None:
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget("cuda", capability, WARP_SIZE)

    @classmethod
    def is_active(cls) -> bool:
        return False

    def get_current_target(self) -> Any:
        return self.target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_active_torch_device(self) -> Any:
        import torch

        return torch.device("meta")

    def get_benchmarker(self) -> Callable[..., Any]:
        raise RuntimeError("an ahead-of-time compile has no device to time on")

    def get_device_interface(self) -> Any:
        raise RuntimeError("an ahead-of-time compile has no device")

    @property
    def utils(self) -> Any:
        """Triton's C utilities (built against the CUDA driver library, which they need
        installed, not a device): some versions' launchers are made through them."""
        from triton.backends.nvidia.driver import CudaUtils

        return CudaUtils()

    def map_python_to_cpp_type(self, ty: str) -> str:
        from triton.backends.nvidia.driver import ty_to_cpp

        return ty_to_cpp(ty)


def capability_of(arch: str) -> int:
    """90 for "sm_90" or "sm_90a" (``EvaluatorSettings.cuda_arch``'s form)."""
    digits = "".join(ch for ch in arch.removeprefix("sm_") if ch.isdigit())
    if not digits:
        raise ValueError(f"no compute capability in {arch!r}")
    return int(digits)


@contextlib.contextmanager
def compile_only(capability: int, compiled: list[Any]) -> Iterator[None]:
    """Within: Triton targets ``capability`` with no device, and a launch compiles instead of
    running (each compiled kernel appended to ``compiled``)."""
    from triton.runtime import driver
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    run, tune = JITFunction.run, Autotuner.run

    def warm(self: Any, *args: Any, grid: Any = None, warmup: bool = False,
             **kwargs: Any) -> Any:
        kernel = run(self, *args, grid=grid, warmup=True, **kwargs)
        if kernel is not None:
            compiled.append(kernel)
        return kernel

    def every_config(self: Any, *args: Any, **kwargs: Any) -> Any:
        # the runner's autotuner times every config: each one is compiled here
        self.nargs = dict(zip(self.arg_names, args, strict=False))
        found = None
        try:
            for config in self.prune_configs(kwargs):
                found = self.fn.run(*args, **kwargs, **config.all_kwargs())
        finally:
            self.nargs = None
        return found

    previous = getattr(driver, "_active", None)  # reset_active() would make a CUDA driver
    driver.set_active(TargetDriver(capability))
    JITFunction.run, Autotuner.run = warm, every_config
    try:
        yield
    finally:
        JITFunction.run, Autotuner.run = run, tune
        driver._active = previous


@contextlib.contextmanager
def meta_generators() -> Iterator[None]:
    """``torch.Generator(device="meta")`` made a CPU generator: a task's ``make_inputs`` seeds
    one for the device it draws on, and PyTorch's factories take a CPU generator for meta
    tensors (which hold no values)."""
    import torch

    real = torch.Generator

    def generator(device: Any = None) -> Any:
        if device is not None and torch.device(device).type == "meta":
            return real()
        return real() if device is None else real(device=device)

    torch.Generator = generator  # type: ignore[assignment,misc]
    try:
        yield
    finally:
        torch.Generator = real  # type: ignore[misc]


def problem(task: Any, shape: Mapping[str, Any]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The inputs and outputs of ``shape`` as the judge lays them out, on the ``meta`` device;
    where ``make_inputs`` needs values (it sorts, or reads one back), drawn on the CPU."""
    module = task.module
    try:
        with meta_generators():
            inputs = tuple(module.make_inputs(dict(shape), 0, "meta"))
    except Exception:  # noqa: BLE001 - a draw that needs values: the CPU has them
        inputs = tuple(module.make_inputs(dict(shape), 0, "cpu"))
    return inputs, tuple(module.make_outputs(dict(shape), "meta"))


def compile_calls(task: Any, launch: Callable[..., None], entry: Any,
                  shapes: Sequence[Mapping[str, Any]], capability: int,
                  workers: int = 1) -> AheadOfTime:
    """Compile every kernel ``entry`` launches on ``shapes`` through the task's ``launch``
    (``launch_triton``), for ``capability``, into Triton's cache; then their launchers. With
    ``workers`` above 1, the shapes are dealt to that many forked copies of this process,
    which compile side by side (Triton compiles one kernel at a time, holding the
    interpreter)."""
    began = time.perf_counter()
    shares = [list(shapes[i::workers]) for i in range(max(1, min(workers, len(shapes))))]
    if len(shares) == 1:
        done = _compile_share(task, launch, entry, shares[0], capability)
    else:
        done = _merge([_forked(lambda share=share: _compile_share(task, launch, entry, share,
                                                                  capability))
                       for share in shares])
    done.seconds = time.perf_counter() - began
    return done


def _compile_share(task: Any, launch: Callable[..., None], entry: Any,
                   shapes: Sequence[Mapping[str, Any]], capability: int) -> AheadOfTime:
    done = AheadOfTime()
    compiled: list[Any] = []
    with compile_only(capability, compiled):
        for shape in shapes:
            label = ",".join(f"{k}={v}" for k, v in shape.items())
            try:
                inputs, outputs = problem(task, shape)
                launch(entry, inputs, outputs, dict(shape))
                done.shapes += 1
            except Exception as exc:  # noqa: BLE001 - that shape compiles at its first call
                done.failed[label] = f"{type(exc).__name__}: {exc}"[:300]
        unique = {getattr(k, "hash", id(k)): k for k in compiled}
        done.hashes = sorted(str(h) for h in unique)
        done.launchers, done.launcher_error = build_launchers(list(unique.values()))
    return done


def _forked(work: Callable[[], AheadOfTime]) -> Callable[[], AheadOfTime]:
    """Start ``work`` in a forked child now; a function that waits for its result."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's outcome comes back through the pipe
        os.close(read)
        try:
            outcome = work().as_json()
        except BaseException as exc:  # noqa: BLE001
            outcome = {"failed": {"(worker)": f"{type(exc).__name__}: {exc}"[:300]}}
        with os.fdopen(write, "w") as out:
            json.dump(outcome, out)
        os._exit(0)
    os.close(write)

    def result() -> AheadOfTime:
        with os.fdopen(read) as reply:
            text = reply.read()
        os.waitpid(child, 0)
        try:
            found = json.loads(text)
        except ValueError:
            return AheadOfTime(failed={"(worker)": "a compile worker died"})
        return AheadOfTime(launchers=found.get("launchers", 0), shapes=found.get("shapes", 0),
                           failed=dict(found.get("failed", {})),
                           launcher_error=found.get("launcher_error", ""),
                           hashes=list(found.get("hashes", [])))
    return result


def _merge(results: Sequence[Callable[[], AheadOfTime]]) -> AheadOfTime:
    done = AheadOfTime()
    hashes: set[str] = set()
    for wait in results:
        part = wait()
        hashes.update(part.hashes)
        done.launchers += part.launchers
        done.shapes += part.shapes
        done.failed.update(part.failed)
        done.launcher_error = done.launcher_error or part.launcher_error
    done.hashes = sorted(hashes)
    return done


def build_launchers(kernels: Sequence[Any]) -> tuple[int, str]:
    """Build (into Triton's cache) the C launcher of each compiled kernel; (how many, why not
    all). Needs the CUDA driver library to link against, not a device."""
    try:
        from triton.backends.nvidia.driver import CudaLauncher
    except Exception as exc:  # noqa: BLE001
        return 0, f"{type(exc).__name__}: {exc}"[:300]
    built, error = 0, ""
    for kernel in kernels:
        try:
            CudaLauncher(kernel.src, kernel.metadata)
            built += 1
        except Exception as exc:  # noqa: BLE001 - the runner builds it at the first call
            error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300] or \
                traceback.format_exc(limit=1)[:300]
    return built, error
