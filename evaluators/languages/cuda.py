"""The ``cuda`` language: ``extern "C" __global__`` kernels built by NVRTC, launched from Python.

Build: NVRTC (``cuda.core``'s ``Program``) compiles the source to a cubin for one architecture,
``EvaluatorSettings.cuda_arch`` (detected with nvidia-smi when unset), with ``-std=c++17``,
``ptxas -v`` (the resource report) and the CUDA toolkit's headers on the include path, so that
``<cuda_bf16.h>``, ``<cuda_fp16.h>`` and ``<cuda/std/...>`` work. Knobs become ``-DNAME=VALUE``.
The build runs in a compiler process that sees no GPU (evaluators/languages/nvrtc.py): a compile pool on a
CPU node builds as well as an evaluation worker does. NVRTC has no ``int64_t`` unless a header
provides it: use ``long long``.

Load (in the sandbox): the cubin becomes a module in PyTorch's CUDA context, and the entry kernel
a ``CudaFunction`` (evaluators/languages/cuda_module.py), passed to the task's ``launch_cuda`` as ``fn``::

    fn(grid, block, *args, shared_mem=0)   # launch on PyTorch's current stream
    fn.kernel("other_name")                # another kernel of the same source
    fn.knobs                                # the knob values the module was built with
    fn.device.sm_count, fn.device.l2_bytes  # the GPU's figures, read from its driver

``grid`` and ``block`` are an int or a tuple of up to three; ``args`` are tensors (their data
pointer is passed), ints and floats (sized to the kernel's parameter: ``int``/``long long``,
``float``/``double``) and bools.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...search import SPECS, Candidate, read_dispatch_table, route_symbol
from ..settings import EvaluatorSettings, normalize_cuda_arch
from .base import BuildError, KernelLanguage, LoadedKernel, LoadError, macro_definitions
from .screen import ScreenRule

_CALL = r"\s*(?:\)\s*)*\("  # also through parentheses around the name: (clock)()

# What a CUDA kernel may not use, and why. The launcher (the task's, trusted) owns streams,
# memory and geometry; the kernel reads its inputs and writes its outputs. The compiler process
# checks the PTX as well (nvrtc.PTX_RULES), which no macro or string pasting can hide from.
CUDA_SCREEN_RULES = (
    ScreenRule("digraphs", r"%:",
               "`%:` is `#` spelled as a digraph, which hides includes, macros and token pasting "
               "from this screen; write `#`"),
    ScreenRule("the CUDA runtime API",
               r"\bcuda(?!GridDependencySynchronize|TriggerProgrammaticLaunchCompletion)"
               r"[A-Z]\w*" + _CALL,
               "a kernel may not call the CUDA runtime (streams, events, allocation, copies, "
               "device-side launches): the task's launcher owns all of that"),
    ScreenRule("device-side launches", r"<<<|\bcudaGraph\w*",
               "dynamic parallelism is not built (no relocatable device code); launch geometry "
               "belongs to the launcher"),
    ScreenRule("streams and events", r"\bcuda(Stream|Event)_t\b|\bCU(stream|event)\b",
               "work on other streams escapes the timing; kernels run on the launcher's stream"),
    ScreenRule("host threads", r"\bstd\s*::\s*(thread|jthread|async)\b|\bpthread_\w+"
               r"|#\s*include\s*<\s*(thread|pthread\.h|future)\s*>",
               "a kernel is device code; it may not start host threads"),
    ScreenRule("timers", r"\b(clock|clock64|__globaltimer)" + _CALL
               + r"|%+\s*(clock|globaltimer)|\bstd\s*::\s*chrono\b",
               "a kernel may not read GPU or host clocks: it could tell when it is being timed"),
    ScreenRule("printf", r"\b(printf|vprintf)" + _CALL,
               "device printf goes through a host buffer: it distorts timing and floods the log"),
    ScreenRule("device allocation", r"\b(malloc|free|__nv_aligned_device_malloc)" + _CALL
               + r"|__managed__",
               "a kernel may not allocate (device heap or managed memory); write only into the "
               "outputs"),
    ScreenRule("non-system includes", r"#\s*include\s*\"|#\s*include\s*<\s*[/.]"
               r"|#\s*include\s*<[^>]*\.\.|#\s*(embed|include_next|import)\b|__has_include",
               "a kernel is one file and may include only the toolkit's headers as <name>"),
    ScreenRule("token pasting", r"##",
               "token pasting can assemble names that this screen cannot see"),
)


@functools.lru_cache(maxsize=1)
def detect_cuda_arch() -> str:
    """The compute capability of the machine's first GPU as 'sm_XY', from nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise RuntimeError("EvaluatorSettings.cuda_arch is not set and nvidia-smi is not on the "
                           "PATH to detect it: set cuda_arch (e.g. 'sm_90' for an H100/H200)")
    try:
        out = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        return normalize_cuda_arch(out.split()[0])
    except (OSError, subprocess.SubprocessError, IndexError, ValueError) as exc:
        raise RuntimeError(f"EvaluatorSettings.cuda_arch is not set and nvidia-smi could not "
                           f"report a compute capability ({exc}): set cuda_arch, e.g. "
                           f"'sm_90'") from exc


@functools.lru_cache(maxsize=1)
def toolkit_include_dirs() -> tuple[str, ...]:
    """The CUDA headers' folder (for <cuda_bf16.h> and friends), or none when not found."""
    candidates: list[str] = []
    try:
        from cuda.pathfinder import find_nvidia_header_directory

        found = find_nvidia_header_directory("cudart")
        if found:
            candidates.append(found)
    except (ImportError, RuntimeError):
        pass
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            candidates.append(os.path.join(root, "include"))
    for folder in candidates:
        if os.path.isfile(os.path.join(folder, "cuda_bf16.h")):
            return (os.path.realpath(folder),)
    return ()


@functools.lru_cache(maxsize=1)
def nvrtc_identity() -> str:
    """NVRTC's version, part of every cache key (imports the bindings once per process)."""
    from .nvrtc import INSTALL_HINT, nvrtc_version

    try:
        return "nvrtc " + nvrtc_version()
    except ImportError as exc:
        raise RuntimeError(INSTALL_HINT) from exc


def _defines(knobs: Mapping[str, Any]) -> list[tuple[str, str]]:
    pairs = []
    for flag in macro_definitions(knobs):
        name, _, value = flag[2:].partition("=")
        pairs.append((name, value))
    return pairs


class CudaLanguage(KernelLanguage):
    """CUDA C++ device code built by NVRTC and launched through the CUDA driver."""

    language_spec = SPECS["cuda"]
    artifact_suffix = ".kscubin"
    screen_rules = CUDA_SCREEN_RULES

    def __init__(self, arch: str | None = None) -> None:
        self._arch = normalize_cuda_arch(arch) if arch is not None else None

    @classmethod
    def from_settings(cls, settings: EvaluatorSettings) -> CudaLanguage:
        return cls(settings.cuda_arch)

    @property
    def arch(self) -> str:
        """The target architecture: the configured one, else the detected one."""
        return self._arch or detect_cuda_arch()

    def cache_key_parts(self, candidate: Candidate) -> Sequence[str]:
        return (self.arch, "-std=c++17", nvrtc_identity(), *toolkit_include_dirs())

    def build_request(self, candidate: Candidate, artifact: Path) -> dict[str, Any]:
        """What the NVRTC compiler process is asked to build (evaluators/languages/nvrtc.py): a language
        built by NVRTC with more headers or options (``cute``) adds them here."""
        return {"source": candidate.source, "arch": self.arch, "entry": candidate.entry,
                "defines": _defines(candidate.knob_values),
                "include_dirs": list(toolkit_include_dirs()), "artifact": str(artifact),
                "knobs": dict(candidate.knob_values)}

    def build(self, candidate: Candidate, workdir: Path, artifact: Path, timeout_s: float) -> None:
        from .nvrtc import build_in_compiler_process

        request = self.build_request(candidate, artifact)
        table = read_dispatch_table(candidate.source)
        if table is not None:  # a dispatch kernel: its entry is one copy per route
            request["entry"] = route_symbol(candidate.entry, 0)
            request["dispatch"] = table.to_json()
        reply = build_in_compiler_process(request, timeout_s)
        if "fault" in reply:
            raise RuntimeError(f"the NVRTC compiler process failed: {reply['fault']}")
        if not reply["ok"]:
            raise BuildError(reply["log"] or "NVRTC failed without a log")

    def load(self, artifact: Path, entry: str, spec: Mapping[str, Any]) -> LoadedKernel:
        from .cuda_module import CudaModule

        module = CudaModule.load(artifact)  # raises LoadError with the reason
        try:
            if module.dispatch is not None:  # the launch of each shape picks its route
                return LoadedKernel(fn=module.route(entry, 0), handle=module)
            return LoadedKernel(fn=module.function(entry), handle=module)
        except LoadError:
            module.unload()
            raise

    def for_shape(self, kernel: LoadedKernel, shape: Mapping[str, Any]) -> Any:
        module = kernel.handle
        if module.dispatch is None:
            return kernel.fn
        return module.route_for(kernel.fn.entry, shape)

    def unload(self, kernel: LoadedKernel) -> None:
        kernel.handle.unload()

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()

    def resources(self, kernel: LoadedKernel) -> dict[str, Any]:
        return kernel.handle.resources()


__all__ = ["CUDA_SCREEN_RULES", "CudaLanguage", "LoadError", "detect_cuda_arch"]
