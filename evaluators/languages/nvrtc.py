"""NVRTC builds: CUDA C++ source to a cubin for one architecture, in a long-lived compiler process.

NVRTC is a library, so a build that hangs (a template explosion) or crashes would take the caller
with it. Builds therefore run in a child process (``python -m kernelswarm.evaluators.languages.nvrtc``),
one per building process, started on first use with the scrubbed environment and no visible GPU
(``CUDA_VISIBLE_DEVICES=""``: NVRTC never needs one, and a compile pool on a CPU node has none).
It stays up between builds because importing the CUDA bindings costs more than a typical build
(~0.3 s against ~0.1 s); a build past its time limit kills it, and the next build starts another.

The child compiles with ``cuda.core``'s ``Program`` (NVRTC) to a cubin, with ``ptxas -v`` for the
resource report, then reads the PTX of the same compilation to refuse what source screening can
miss (clock registers assembled from string pieces, device printf/malloc behind macros).

The artifact is the cubin behind a one-line JSON header (``ARTIFACT_MAGIC``): the architecture,
the NVRTC version and, per kernel, ptxas's registers, spills and stack frame.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..channel import ChannelError, FrameBuffer, read_frame, write_frame
from ..environment import python_path, scrubbed_environment
from .base import BuildError

ARTIFACT_MAGIC = b"KSCUBIN1\n"
INSTALL_HINT = ("the cuda language needs NVRTC through cuda.core: "
                "pip install cuda-core cuda-bindings nvidia-cuda-nvrtc")
_MAX_LOG_CHARS = 3000

# What a kernel's PTX may not contain, and why (found after macro expansion and string pasting).
PTX_RULES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("a clock register", re.compile(r"%(clock64|clock|globaltimer(_lo|_hi)?)\b"),
     "a kernel may not read GPU clocks: it could tell when it is being timed"),
    ("device printf", re.compile(r"\bvprintf\b"),
     "printf from a kernel goes through a host buffer that distorts timing and floods the log"),
    ("device malloc/free", re.compile(r"\.extern\s+\.func[^;]*\b(malloc|free)\b"),
     "a kernel may not allocate: the device heap is small and shared; use the outputs"),
)


@dataclass(frozen=True)
class CompiledModule:
    """What one NVRTC build produced."""

    cubin: bytes
    ptx: str
    log: str


def nvrtc_version() -> str:
    """NVRTC's version as 'major.minor' (imports the bindings: call in the compiler process)."""
    from cuda.bindings import nvrtc

    _, major, minor = nvrtc.nvrtcVersion()
    return f"{major}.{minor}"


def _program_api() -> tuple[Any, Any]:
    try:
        from cuda.core import Program, ProgramOptions
    except ImportError:
        try:
            from cuda.core.experimental import Program, ProgramOptions
        except ImportError as exc:
            raise RuntimeError(INSTALL_HINT) from exc
    return Program, ProgramOptions


class _Log:
    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str | bytes) -> None:
        self.parts.append(text.decode(errors="replace") if isinstance(text, bytes) else text)

    def text(self) -> str:
        return "".join(self.parts).replace("\x00", "").strip()


# NVRTC options a build request may set besides the fixed ones (``ProgramOptions`` fields).
EXTRA_OPTIONS = ("device_as_default_execution_space",)


def compile_source(source: str, arch: str, defines: Sequence[tuple[str, str]],
                   include_dirs: Sequence[str],
                   extra: Mapping[str, Any] | None = None) -> CompiledModule:
    """Compile in this process; ``BuildError`` carries NVRTC's log on a compile error.
    ``extra``: options of ``EXTRA_OPTIONS`` (CuTe's headers need unannotated functions compiled
    as device code, ``device_as_default_execution_space``)."""
    from cuda.bindings import nvrtc

    unknown = sorted(set(extra or {}) - set(EXTRA_OPTIONS))
    if unknown:
        raise ValueError(f"NVRTC options {unknown} are not among {EXTRA_OPTIONS}")
    program_type, options_type = _program_api()
    options = options_type(name="kernel.cu", arch=arch, std="c++17", ptxas_options="-v",
                           define_macro=list(defines) or None,
                           include_path=list(include_dirs) or None, **dict(extra or {}))
    program = program_type(source, "c++", options)
    log = _Log()
    try:
        try:
            code = program.compile("cubin", logs=log)
        except Exception as exc:  # NVRTCError: its text is the compilation log
            if type(exc).__name__ not in ("NVRTCError", "CUDAError"):
                raise
            raise BuildError(trim_nvrtc_log(str(exc))) from None
        _, size = nvrtc.nvrtcGetPTXSize(program.handle)
        buffer = b" " * size
        nvrtc.nvrtcGetPTX(program.handle, buffer)
        return CompiledModule(bytes(code.code), buffer.rstrip(b"\x00 ").decode(), log.text())
    finally:
        program.close()


def trim_nvrtc_log(log: str) -> str:
    """NVRTC's errors with their source lines, without the wrapper's preamble; cut if long."""
    text = log.split("compilation log:", 1)[-1].replace("\x00", "").strip()
    return text if len(text) <= _MAX_LOG_CHARS else text[:_MAX_LOG_CHARS] + "\n... (log cut)"


def check_ptx(ptx: str, entry: str) -> None:
    """Raise ``BuildError`` when the PTX lacks ``entry`` or uses what ``PTX_RULES`` forbid."""
    for what, pattern, reason in PTX_RULES:
        if pattern.search(ptx):
            raise BuildError(f"the compiled kernel uses {what}: {reason}")
    entries = re.findall(r"\.entry\s+(\w+)", ptx)
    if entry not in entries:
        raise BuildError(f"the module has no kernel `{entry}` (kernels: {', '.join(entries) or 'none'})"
                         f": declare it `extern \"C\" __global__` with exactly that name (C++ "
                         f"mangles other names)")


_FUNCTION = re.compile(r"Function properties for (\w+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")


def ptxas_resources(log: str) -> dict[str, dict[str, int]]:
    """Per kernel, from ``ptxas -v``: registers, stack frame and spill bytes."""
    found: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in log.splitlines():
        if match := _FUNCTION.search(line):
            current = match.group(1)
            found.setdefault(current, {})
        elif current and (match := _FRAME.search(line)):
            frame, stores, loads = map(int, match.groups())
            found[current].update(stack_frame_bytes=frame, spill_store_bytes=stores,
                                  spill_load_bytes=loads)
        elif current and (match := _USED.search(line)):
            found[current]["registers"] = int(match.group(1))
    return found


def write_artifact(path: Path, module: CompiledModule, arch: str, version: str,
                   knobs: Mapping[str, Any], dispatch: Mapping[str, Any] | None = None) -> None:
    """The cubin behind a JSON header (what ``CudaModule.load`` reads back); ``dispatch``: a
    dispatch kernel's table (search/dispatch.py), which the loader routes launches by."""
    header = {"arch": arch, "nvrtc": version, "knobs": dict(knobs),
              "kernels": ptxas_resources(module.log)}
    if dispatch is not None:
        header["dispatch"] = dict(dispatch)
    path.write_bytes(ARTIFACT_MAGIC + json.dumps(header).encode() + b"\n" + module.cubin)


def read_artifact(path: Path) -> tuple[dict[str, Any], bytes]:
    """The header and the cubin of an artifact written by ``write_artifact``."""
    data = path.read_bytes()
    if not data.startswith(ARTIFACT_MAGIC):
        raise ValueError(f"{path} is not a kernelswarm cuda artifact")
    end = data.index(b"\n", len(ARTIFACT_MAGIC))
    return json.loads(data[len(ARTIFACT_MAGIC):end]), data[end + 1:]


def _handle(request: Mapping[str, Any], version: str) -> dict[str, Any]:
    try:
        module = compile_source(request["source"], request["arch"],
                                [tuple(d) for d in request["defines"]], request["include_dirs"],
                                request.get("options"))
        check_ptx(module.ptx, request["entry"])
        write_artifact(Path(request["artifact"]), module, request["arch"], version,
                       request.get("knobs", {}), request.get("dispatch"))
    except BuildError as exc:
        return {"ok": False, "log": exc.log}
    return {"ok": True, "log": module.log}


class NvrtcProcess:
    """The parent's handle on one compiler process; ``compile`` is serialised by a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._request_w = self._reply_r = -1
        self._owner = os.getpid()

    def _start(self) -> None:
        request_r, self._request_w = os.pipe()
        self._reply_r, reply_w = os.pipe()
        env = scrubbed_environment(extra={"PYTHONPATH": python_path(),
                                          "CUDA_VISIBLE_DEVICES": ""})
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", __name__, "--request-fd", str(request_r), "--reply-fd",
                 str(reply_w)], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, pass_fds=(request_r, reply_w), start_new_session=True)
        finally:
            os.close(request_r)
            os.close(reply_w)
        self._frames = FrameBuffer()

    def _stop(self) -> None:
        if self._process is not None:
            try:
                os.killpg(self._process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self._process.wait()
            os.close(self._request_w)
            os.close(self._reply_r)
        self._process = None

    def compile(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send one build; ``BuildError`` (not cacheable) on a timeout or a dead compiler."""
        with self._lock:
            if os.getpid() != self._owner:  # a forked copy must not share the parent's pipes
                self._process, self._owner = None, os.getpid()
            if self._process is None or self._process.poll() is not None:
                self._stop()
                self._start()
            try:
                write_frame(self._request_w, request)
                return self._reply(timeout_s)
            except BuildError:
                self._stop()
                raise
            except (OSError, ChannelError) as exc:
                self._stop()
                raise BuildError(f"the NVRTC compiler process failed ({exc}); the build can be "
                                 f"retried", cacheable=False) from None

    def _reply(self, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BuildError(f"NVRTC ran past compile_timeout_s={timeout_s:g} s and was "
                                 f"killed; simplify templates/unrolling or raise the limit",
                                 cacheable=False)
            ready, _, _ = select.select([self._reply_r], [], [], remaining)
            if not ready:
                continue
            data = os.read(self._reply_r, 1 << 16)
            if not data:
                raise BuildError("the NVRTC compiler process died during the build (a crash "
                                 "inside NVRTC?)", cacheable=False)
            for frame in self._frames.feed(data):
                return frame


_PROCESS = NvrtcProcess()


def build_in_compiler_process(request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Compile ``request`` in this process's compiler process: ``{"ok", "log"}`` or a fault."""
    return _PROCESS.compile(request, timeout_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kernelswarm.evaluators.languages.nvrtc")
    parser.add_argument("--request-fd", type=int, required=True)
    parser.add_argument("--reply-fd", type=int, required=True)
    args = parser.parse_args(argv)
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        version = nvrtc_version()
        _program_api()
    except (ImportError, RuntimeError) as exc:
        version, missing = "", str(exc) or INSTALL_HINT
    else:
        missing = ""
    while True:
        request = read_frame(args.request_fd)
        if request is None:
            return 0
        if missing:
            reply = {"fault": f"{INSTALL_HINT} ({missing})"}
        else:
            try:
                reply = _handle(request, version)
            except Exception as exc:  # a bug or a broken installation, not the candidate's
                reply = {"fault": f"{type(exc).__name__}: {exc}"}
        write_frame(args.reply_fd, reply)


if __name__ == "__main__":
    sys.exit(main())
