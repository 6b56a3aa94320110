"""The ``torch-ext`` language: a C++ (or CUDA) PyTorch extension, for kernels that need host code.

Source: one C++ file written against ``<torch/extension.h>`` (included for you) that binds its
entry point itself::

    void silu_and_mul(torch::Tensor out, torch::Tensor x) { ... }
    PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("silu_and_mul", &silu_and_mul); }

The task's ``launch_torch_ext(fn, inputs, outputs, shape)`` receives the bound function as
``fn`` and passes it tensors (and sizes). It writes into the outputs and returns nothing. Knobs
become ``-DNAME=VALUE``. On a CPU device the file is compiled as C++; on CUDA as CUDA (nvcc), for
the device's architecture only (``TORCH_CUDA_ARCH_LIST``), so one source may hold both paths
under ``#ifdef __CUDACC__``.

Build: ``torch.utils.cpp_extension.load_inline`` with ninja, in a child process (own process
group, scrubbed environment, ``compile_timeout_s``; evaluators/languages/torch_ext_build.py)
that builds without importing the result, with its build directory inside the content-hash
cache; the library is published there as the artifact. Nothing of the candidate is loaded in
the judge's process. A build takes ~30 s on CPU and ~60 s with CUDA: raise
``compile_timeout_s`` above its 60 s default for CUDA builds.

Load (only in the sandbox): the library is imported as a Python extension module. C++ that calls
ATen compute (``at::mul``, ``x.sum()``) is seen by the sandbox's compute guard through the
dispatcher and REJECTED; the screen refuses the ways around the dispatcher. The imported-symbol
check of ``cpp`` libraries does not apply: an extension imports the Python C API by design. It is
judged by what it runs, in a runner under the same OS isolation (evaluators/sandbox/isolation.py).
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...search import SPECS, Candidate
from .base import (
    BuildError,
    KernelLanguage,
    LoadedKernel,
    LoadError,
    macro_definitions,
    run_compiler,
)
from .cpp import CPP_SCREEN_RULES, compiler, compiler_identity
from .screen import ScreenRule

CFLAGS = ("-O3",)
# Run as a script, so that the build process imports nothing of kernelswarm.
BUILD_SCRIPT = Path(__file__).with_name("torch_ext_build.py")
_BINDING = re.compile(r"\bPYBIND11_MODULE\s*\(\s*TORCH_EXTENSION_NAME\b")

# The cpp rules, plus what an extension could use to compute with PyTorch out of the compute
# guard's sight, or to leave the timed stream.
TORCH_EXT_SCREEN_RULES = CPP_SCREEN_RULES + (
    ScreenRule("ATen thread pool", r"\bat\s*::\s*(parallel_for|parallel_reduce|launch|"
               r"intraop_launch|set_num_threads|set_num_interop_threads|internal)\b"
               r"|\btorch\s*::\s*set_num_threads\b",
               "kernels run on one thread on the CPU; ATen's pool would start more"),
    ScreenRule("PyTorch around the dispatcher",
               r"\bat\s*::\s*(native|cpu|meta|_ops|compositeexplicitautograd\w*|"
               r"compositeimplicitautograd\w*)\s*::"
               r"|\bat\s*::\s*cuda\s*::\s*(?!getCurrentCUDAStream\b|getCurrentDeviceProperties\b"
               r"|CUDAGuard\b|OptionalCUDAGuard\b)\w+"
               r"|\bc10\s*::\s*(Dispatcher|impl)\b|\bDispatchKey|\btorch\s*::\s*(jit|autograd)\b",
               "ATen kernels called directly, or a changed dispatch, would compute with PyTorch "
               "where the sandbox cannot see it; a custom kernel does its own work"),
    ScreenRule("streams, events and graphs",
               r"\bcuda(StreamCreate\w*|StreamPerThread|StreamLegacy|Event\w*|Graph\w*|"
               r"LaunchHostFunc|StreamAddCallback|DeviceSynchronize|SetDevice)\b"
               r"|\b(getStreamFromPool|getStreamFromExternal|setCurrentCUDAStream|CUDAStreamGuard"
               r"|CUDAEvent|CUDAGraph)\b",
               "work on another stream or in a graph escapes the timer, and events are the "
               "timer's own; launch on at::cuda::getCurrentCUDAStream()"),
    ScreenRule("Python from C++", r"\bpy(bind11)?\s*::\s*(module_?\s*::\s*import|eval|exec|"
               r"eval_file|globals)\b|\bPy[A-Z][A-Za-z]*_\w+\s*\(",
               "an extension may not run Python: the evaluator's checks live there"),
)

_ERROR_LINE = re.compile(r"(:\d+(:\d+)?: (fatal )?error:|\(\d+\): (catastrophic )?error:"
                         r"|undefined reference|error: ld returned)")
_MAX_LOG_CHARS = 2000


def trim_build_log(log: str) -> str:
    """The first compiler errors (gcc's or nvcc's format) with two lines of context each."""
    lines = log.splitlines()
    starts = [i for i, line in enumerate(lines) if _ERROR_LINE.search(line)]
    kept: list[str] = []
    for i in starts[:3]:
        kept.extend(lines[i:i + 3])
    if len(starts) > 3:
        kept.append(f"... and {len(starts) - 3} more errors")
    text = "\n".join(kept or lines[-20:]).strip()
    return text if len(text) <= _MAX_LOG_CHARS else text[:_MAX_LOG_CHARS] + "\n... (log cut)"


@functools.lru_cache(maxsize=2)
def _nvcc_identity() -> str:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise RuntimeError("torch-ext on a cuda device needs nvcc on the PATH")
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30).stdout
    return out.strip().splitlines()[-1] if out.strip() else "nvcc"


def torch_arch_list(arch: str) -> str:
    """``TORCH_CUDA_ARCH_LIST`` for one architecture: 'sm_90a' -> '9.0a'."""
    digits = arch.removeprefix("sm_")
    suffix = digits[-1] if digits[-1].isalpha() else ""
    number = digits.rstrip("af")
    return f"{number[:-1]}.{number[-1]}{suffix}"


def module_name(artifact: Path) -> str:
    """The extension's module name: fixed by the artifact's content hash."""
    return f"kernelswarm_ext_{artifact.stem}"


class TorchExtLanguage(KernelLanguage):
    """A PyTorch C++/CUDA extension built with load_inline; runs on CPU or CUDA."""

    language_spec = SPECS["torch-ext"]
    artifact_suffix = ".so"
    screen_rules = TORCH_EXT_SCREEN_RULES
    host_code = True

    def __init__(self, device: str = "cpu", arch: str | None = None) -> None:
        self.device = device.split(":")[0]
        self._arch = arch

    @classmethod
    def from_settings(cls, settings: Any) -> TorchExtLanguage:
        return cls(settings.device, getattr(settings, "cuda_arch", None))

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"

    @property
    def arch(self) -> str:
        if self._arch:
            return self._arch
        from .cuda import detect_cuda_arch

        return detect_cuda_arch()

    def cache_key_parts(self, candidate: Candidate) -> Sequence[str]:
        parts = [self.device, "torch " + importlib.metadata.version("torch"), *CFLAGS,
                 compiler_identity(compiler()), f"python {sys.version_info[:2]}"]
        if self.cuda:
            parts += [self.arch, _nvcc_identity()]
        return parts

    def build(self, candidate: Candidate, workdir: Path, artifact: Path, timeout_s: float) -> None:
        if not _BINDING.search(candidate.source):
            raise BuildError(f"the source binds no functions: end it with PYBIND11_MODULE("
                             f"TORCH_EXTENSION_NAME, m) {{ m.def(\"{candidate.entry}\", "
                             f"&{candidate.entry}); }}")
        defines = macro_definitions(candidate.knob_values)
        environment = {"MAX_JOBS": "2"}
        if self.cuda:
            environment["TORCH_CUDA_ARCH_LIST"] = torch_arch_list(self.arch)
        request = {"name": module_name(artifact), "source": candidate.source, "cuda": self.cuda,
                   "build_directory": str(workdir / "build"), "environment": environment,
                   "cflags": [*CFLAGS, *defines], "cuda_cflags": [*CFLAGS, *defines]}
        (workdir / "build").mkdir()
        (workdir / "request.json").write_text(json.dumps(request))
        status, log = run_compiler([sys.executable, str(BUILD_SCRIPT), "request.json"],
                                   workdir, timeout_s)
        library = workdir / "build" / f"{module_name(artifact)}.so"
        if status != 0 or not library.is_file():
            raise BuildError(trim_build_log(log) or f"the build exited with status {status}")
        shutil.copyfile(library, artifact)

    def load(self, artifact: Path, entry: str, spec: Mapping[str, Any]) -> LoadedKernel:
        name = module_name(artifact)
        try:
            found = importlib.util.spec_from_file_location(name, artifact)
            if found is None or found.loader is None:
                raise ImportError(f"{artifact} is not an extension module")
            module = importlib.util.module_from_spec(found)
            found.loader.exec_module(module)
        except Exception as exc:
            raise LoadError(f"importing the extension failed: {type(exc).__name__}: "
                            f"{exc}") from None
        fn = getattr(module, entry, None)
        if not callable(fn):
            raise LoadError(f"the extension binds no function `{entry}`: add m.def(\"{entry}\", "
                            f"&{entry}) to its PYBIND11_MODULE")
        return LoadedKernel(fn=fn, handle=module)

    def synchronize(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()  # the whole device: every stream's work is waited for
