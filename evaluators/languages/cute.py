"""The ``cute`` language: CUDA C++ written with CuTe, built by NVRTC, launched from Python.

CuTe is the layout algebra under CUTLASS 3 and 4: tensors as pointers with layouts, tiled copies
(128-bit vectors, ``cp.async``, TMA) and MMA atoms (``mma.sync``, Hopper's WGMMA) that a kernel
composes, so that tiling and data movement are structure a search can change a step at a time.

Build: the same NVRTC compiler process as ``cuda`` (evaluators/languages/nvrtc.py), with three differences:

- CUTLASS's headers on the include path (``cutlass_include_dir``: ``$CUTLASS_PATH/include``, else
  the ``nvidia-cutlass`` wheel's copy; ``pip install 'kernelswarm[cute]'``), and libcu++'s
  ``<cuda/std/...>`` headers, which CuTe includes (``libcudacxx_include_dirs``);
- functions without an execution space are compiled as device code (NVRTC's ``-default-device``),
  as CuTe's headers leave some ``constexpr`` helpers unannotated, and ``NDEBUG`` is defined, so
  CuTe's debug assertions do not reach the kernel;
- the target is the GPU's arch-specific one (``sm_90a`` where ``cuda`` builds ``sm_90``), which
  Hopper's WGMMA and TMA instructions need; such a cubin runs on that architecture only, which is
  the machine it was built for.

Everything else is ``cuda``'s: the screen (no runtime API, clocks, printf, allocation or
includes but ``<name>``; and, for cute, no PyTorch or Python headers or namespaces: the kernel
is device code, so an entry point that would compute with PyTorch is REJECTED), the PTX check after macros and templates are expanded, the artifact (a
cubin behind its resource header), loading into PyTorch's context, and the launch convention
``fn(grid, block, *args, shared_mem=0)`` the task's ``launch_cute`` calls.

NVRTC was chosen over nvcc (5.1 s against 3.1 s for the same copy kernel on this project's
machines, and no host compiler in the loop) and over the CuTe Python DSL (whose runtime
libraries are 236 MB unpacked): see docs/tasks.md, "CuTe kernels".
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...search import SPECS, Candidate
from .cuda import CUDA_SCREEN_RULES, CudaLanguage, nvrtc_identity, toolkit_include_dirs
from .screen import ScreenRule

INSTALL_HINT = ("the cute language needs CUTLASS's headers: pip install 'kernelswarm[cute]' "
                "(the nvidia-cutlass wheel), or set CUTLASS_PATH to a CUTLASS checkout")

# What every cute build adds to cuda's: device code by default, CuTe's assertions compiled out.
CUTE_OPTIONS: dict[str, Any] = {"device_as_default_execution_space": True}
CUTE_DEFINES = (("NDEBUG", "1"),)

# cuda's rules, and no host library: a cute file is device code that the task's launcher launches;
# PyTorch's, pybind11's or Python's headers could only mean computing or calling on the host.
CUTE_SCREEN_RULES = (
    *CUDA_SCREEN_RULES,
    ScreenRule("PyTorch, Python or host code",
               r"#\s*include\s*<\s*(?:torch|ATen|c10|pybind11|caffe2)\b|#\s*include\s*<\s*Python\.h"
               r"|\b(?:at|c10|torch|pybind11)\s*::",
               "a cute kernel is device code launched by the task's launcher: it may not compute "
               "with PyTorch or call Python; write the work as CuTe copies and arithmetic"),
)

_VERSION = re.compile(r"#define\s+CUTLASS_(MAJOR|MINOR|PATCH)\s+(\d+)")


def _has_cute(folder: str | os.PathLike[str]) -> bool:
    return os.path.isfile(os.path.join(folder, "cute", "tensor.hpp"))


@functools.lru_cache(maxsize=1)
def cutlass_include_dir() -> str:
    """The folder holding ``cute/`` and ``cutlass/``: ``$CUTLASS_PATH/include`` when the variable
    is set (a folder without the headers is an error, not a reason to look elsewhere), else the
    ``nvidia-cutlass`` wheel's; ``RuntimeError`` with the install hint."""
    root = os.environ.get("CUTLASS_PATH")
    if root:
        folder = os.path.join(root, "include")
        if _has_cute(folder):
            return os.path.realpath(folder)
        raise RuntimeError(f"CUTLASS_PATH={root} has no include/cute/tensor.hpp; point it at a "
                           f"CUTLASS checkout, or unset it and pip install 'kernelswarm[cute]'")
    tried = []
    spec = importlib.util.find_spec("cutlass_library")
    for location in (spec.submodule_search_locations or []) if spec else []:
        folder = os.path.join(location, "source", "include")
        if _has_cute(folder):
            return os.path.realpath(folder)
        tried.append(f"{location} (no source/include/cute/tensor.hpp)")
    raise RuntimeError(INSTALL_HINT + (f"; looked in {', '.join(tried)}" if tried else ""))


@functools.lru_cache(maxsize=1)
def cutlass_version() -> str:
    """CUTLASS's version from its ``cutlass/version.h``, part of every cache key."""
    text = Path(cutlass_include_dir(), "cutlass", "version.h").read_text(errors="replace")
    parts = dict(_VERSION.findall(text))
    return "cutlass " + ".".join(parts.get(k, "?") for k in ("MAJOR", "MINOR", "PATCH"))


@functools.lru_cache(maxsize=1)
def libcudacxx_include_dirs() -> tuple[str, ...]:
    """Where libcu++'s headers are, as CUTLASS includes them: ``<cuda/std/...>`` (CUDA 12) or
    ``<cccl/cuda/std/...>`` (CUDA 13, whose toolkit keeps them in ``include/cccl``). Looked for
    in the include folder NVRTC's headers come from, then ``$CUDA_HOME``'s, ``$CUDA_PATH``'s and
    /usr/local/cuda's, then the ``nvidia`` wheels'; none when not found."""
    folders = list(toolkit_include_dirs())
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            folders.append(os.path.join(root, "include"))
    for package in ("nvidia", "nvidia.cu13", "nvidia.cuda_cccl"):
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            continue
        for location in (spec.submodule_search_locations or []) if spec else []:
            folders += [os.path.join(location, "include"),
                        os.path.join(location, "cuda_cccl", "include"),
                        os.path.join(location, "cu13", "include")]
    for folder in folders:
        if os.path.isfile(os.path.join(folder, "cccl", "cuda", "std", "cassert")):
            # both spellings: <cccl/cuda/std/...> from the folder, <cuda/std/...> from cccl/
            return (os.path.realpath(os.path.join(folder, "cccl")), os.path.realpath(folder))
        if os.path.isfile(os.path.join(folder, "cuda", "std", "cassert")):
            return (os.path.realpath(folder),)
    return ()


def arch_specific(arch: str) -> str:
    """``sm_90a`` for ``sm_90`` (and ``sm_100a`` for ``sm_100``): the target whose instructions
    (WGMMA, TMA, tcgen05) CuTe's Hopper and Blackwell atoms emit; older targets have none."""
    major = int(re.sub(r"\D", "", arch)[:-1] or 0)
    return arch if arch.endswith("a") or major < 9 else arch + "a"


class CuteLanguage(CudaLanguage):
    """CUDA C++ with CuTe's layouts, copies and MMA atoms; built and run as ``cuda`` is."""

    language_spec = SPECS["cute"]
    artifact_suffix = ".kscubin"
    screen_rules = CUTE_SCREEN_RULES

    @property
    def arch(self) -> str:
        return arch_specific(super().arch)

    def include_dirs(self) -> list[str]:
        """CUTLASS's, libcu++'s and the toolkit's headers; ``RuntimeError`` (the machine's
        fault, not the candidate's) naming what is missing."""
        libcudacxx = libcudacxx_include_dirs()
        if not libcudacxx:
            raise RuntimeError("the cute language needs libcu++'s headers (<cuda/std/...>, which "
                               "CuTe includes): install the CUDA toolkit or set CUDA_HOME to it")
        return [cutlass_include_dir(), *libcudacxx, *toolkit_include_dirs()]

    def cache_key_parts(self, candidate: Candidate) -> Sequence[str]:
        return (self.arch, "-std=c++17", "-default-device", "-DNDEBUG", nvrtc_identity(),
                cutlass_version(), *self.include_dirs())

    def build_request(self, candidate: Candidate, artifact: Path) -> dict[str, Any]:
        request = super().build_request(candidate, artifact)
        request["include_dirs"] = self.include_dirs()
        request["defines"] = [*CUTE_DEFINES, *request["defines"]]
        request["options"] = dict(CUTE_OPTIONS)
        return request


__all__ = ["CUTE_SCREEN_RULES", "INSTALL_HINT", "CuteLanguage", "arch_specific", "cutlass_include_dir",
           "cutlass_version", "libcudacxx_include_dirs"]
