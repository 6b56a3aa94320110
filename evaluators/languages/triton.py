"""The ``triton`` language: a Python module of ``@triton.jit`` kernels and a Python entry point.

Source: one Python module. Its entry point (the task's ``entry``, e.g. ``silu_and_mul``) is a
plain Python function that launches the module's ``@triton.jit`` kernels; the task's
``launch_triton(fn, inputs, outputs, shape)`` receives it as ``fn`` and calls it with the
tensors and sizes of the task's calling contract. It writes into the outputs and returns nothing.

Knobs reach the entry point as keyword arguments: the evaluator calls it with every knob's value
(an int, float, bool or str), so it declares each one as a parameter, whose default documents a
sensible value (``def silu_and_mul(out, x, tokens, d, BLOCK=1024)``). The entry passes a knob to
its kernels as a ``tl.constexpr`` parameter (``_kernel[grid](..., BLOCK=BLOCK)``), which makes it
a compile-time constant there, and uses it in the launch geometry (``triton.cdiv(d, BLOCK)``).

Build (in the judge, or a compile pool): the screen (evaluators/languages/triton_screen.py), a
syntax check with ``compile()`` (nothing is run or imported), checks that the entry point is a
module-level function that takes every knob, then the source with a trailing comment holding
the knob values is written to the content-hash cache. Triton's own compilation happens
on the first call, in the sandbox.

Load (only in the sandbox): the module is executed there under a private name. On a CPU device
the sandbox runs Triton's interpreter (``TRITON_INTERPRET=1``, set in the sandbox's environment
only); on CUDA, ``synchronize`` waits for the whole device, so work on any stream is timed.
Every call runs under the runner's integrity checks (evaluators/runner/integrity.py): PyTorch may
only allocate and view tensors, and outputs stay the tensors passed in.
"""

from __future__ import annotations

import ast
import functools
import json
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ...search import SPECS, Candidate
from .base import BuildError, KernelLanguage, LoadedKernel, LoadError
from .triton_screen import TRITON_SCREEN_RULES

KNOB_TRAILER = "# kernelswarm knobs: "
_FORMAT = "triton-module-1"  # bump when the artifact's layout changes


def _syntax_error(exc: SyntaxError) -> BuildError:
    line = (exc.text or "").rstrip()
    caret = " " * max((exc.offset or 1) - 1, 0) + "^"
    return BuildError(f"kernel.py:{exc.lineno}:{exc.offset}: error: {exc.msg}\n    {line}\n"
                      f"    {caret}")


def _entry_problem(tree: ast.Module, entry: str, knobs: Sequence[str]) -> str | None:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry:
            if any("jit" in ast.unparse(d) for d in node.decorator_list):
                return (f"`{entry}` is a @triton.jit kernel; the entry point is a plain Python "
                        f"function that launches the kernels (e.g. `def {entry}(out, x, ...): "
                        f"_kernel[grid](...)`)")
            if isinstance(node, ast.AsyncFunctionDef):
                return f"`{entry}` must be a plain function, not `async def`"
            args = node.args
            names = {a.arg for a in (*args.args, *args.kwonlyargs)}
            missing = [k for k in knobs if k not in names]
            if missing and args.kwarg is None:
                return (f"`{entry}` takes no parameter {', '.join(missing)}: knobs reach the "
                        f"module as keyword arguments of its entry point, e.g. "
                        f"`def {entry}(..., {missing[0]}=...)`")
            return None
    return (f"the module defines no function `{entry}` at top level: the entry point is a "
            f"Python function that launches the kernels")


def _knob_values(knobs: Mapping[str, Any]) -> dict[str, Any]:
    for name, value in knobs.items():
        if not name.isidentifier() or not isinstance(value, (int, float, bool, str)):
            raise BuildError(f"knob {name}={value!r} cannot be a module-level constant: names "
                             f"must be Python identifiers and values numbers, bools or strings")
    return dict(sorted(knobs.items()))


def read_knobs(text: str) -> dict[str, Any]:
    """The knob values written on the artifact's last line by ``build``."""
    last = text.rstrip("\n").rsplit("\n", 1)[-1]
    if not last.startswith(KNOB_TRAILER):
        raise LoadError("the artifact has no knob line: it was not written by this build")
    return json.loads(last[len(KNOB_TRAILER):])


class TritonLanguage(KernelLanguage):
    """Triton kernels in a Python module; interpreted on CPU, JIT-compiled on CUDA."""

    language_spec = SPECS["triton"]
    artifact_suffix = ".py"
    screen_rules = TRITON_SCREEN_RULES
    host_code = True

    def __init__(self, device: str = "cpu", cache_dir: Path | None = None) -> None:
        self.device = device.split(":")[0]
        self.cache_dir = cache_dir

    @classmethod
    def from_settings(cls, settings: Any) -> TritonLanguage:
        return cls(settings.device, settings.cache_dir)

    def cache_key_parts(self, candidate: Candidate) -> Sequence[str]:
        # The artifact is the source and its knob values: the same for every device and triton.
        return (_FORMAT,)

    def build(self, candidate: Candidate, workdir: Path, artifact: Path, timeout_s: float) -> None:
        source = candidate.source
        try:
            tree = ast.parse(source, "kernel.py")
            compile(tree, "kernel.py", "exec", dont_inherit=True)
        except SyntaxError as exc:
            raise _syntax_error(exc) from None
        except ValueError as exc:  # e.g. a NUL byte in the source
            raise BuildError(f"kernel.py: the source cannot be compiled: {exc}") from None
        knobs = _knob_values(candidate.knob_values)
        problem = _entry_problem(tree, candidate.entry, list(knobs))
        if problem:
            raise BuildError(problem)
        body = source if source.endswith("\n") else source + "\n"
        artifact.write_text(body + KNOB_TRAILER + json.dumps(knobs) + "\n")

    def sandbox_environment(self) -> dict[str, str]:
        if self.device == "cpu":
            return {"TRITON_INTERPRET": "1"}
        if self.cache_dir is not None:  # triton's own compiled kernels, shared by the node
            return {"TRITON_CACHE_DIR": str(Path(self.cache_dir) / "triton")}
        return {}

    def load(self, artifact: Path, entry: str, spec: Mapping[str, Any]) -> LoadedKernel:
        text = artifact.read_text()
        knobs = read_knobs(text)
        module_name = f"kernelswarm_triton_{artifact.stem}"
        module = types.ModuleType(module_name)
        module.__file__ = str(artifact)
        # Triton reads the kernels' source back through inspect/linecache, which needs the
        # module registered and its code compiled from the artifact's path.
        sys.modules[module_name] = module
        try:
            exec(compile(text, str(artifact), "exec", dont_inherit=True), module.__dict__)
        except BaseException as exc:  # the candidate's top-level code; SystemExit included
            sys.modules.pop(module_name, None)
            raise LoadError(f"running the kernel module failed: {type(exc).__name__}: "
                            f"{exc}{_line_of(exc, str(artifact))}") from None
        fn = module.__dict__.get(entry)
        if not callable(fn):
            sys.modules.pop(module_name, None)
            raise LoadError(f"the kernel module has no function `{entry}`")
        return LoadedKernel(fn=functools.partial(fn, **knobs) if knobs else fn, handle=module)

    def unload(self, kernel: LoadedKernel) -> None:
        sys.modules.pop(kernel.handle.__name__, None)

    def synchronize(self) -> None:
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()  # the whole device: every stream's work is waited for

    def source_file(self, kernel: LoadedKernel) -> str | None:
        return getattr(kernel.handle, "__file__", None)

    def watch_compiles(self) -> Callable[[], dict[str, float]] | None:
        """Count, from now on, what Triton compiles in this process (kernels that its cache did
        not hold, and C launchers built): a function returning ``{"compiles", "seconds"}``.
        None on the CPU (the interpreter compiles nothing). Installed by the runner before the
        candidate loads; the figures are observations of a process that runs candidate code."""
        if self.device != "cuda":
            return None
        import time

        import triton

        seen = {"compiles": 0.0, "seconds": 0.0}
        compilation = getattr(getattr(triton, "knobs", None), "compilation", None)
        if compilation is not None and hasattr(compilation, "listener"):
            def listener(**event: Any) -> None:
                if not event.get("cache_hit", True):
                    seen["compiles"] += 1
                    total = getattr(event.get("times"), "total", 0)  # microseconds
                    seen["seconds"] += total / 1e6 if isinstance(total, (int, float)) else 0.0
            compilation.listener = listener
        build = sys.modules.get("triton.runtime.build")
        if build is not None and callable(getattr(build, "_build", None)):
            original = build._build

            def timed_build(*args: Any, **kwargs: Any) -> Any:  # a launcher's C compile
                began = time.perf_counter()
                try:
                    return original(*args, **kwargs)
                finally:
                    seen["compiles"] += 1
                    seen["seconds"] += time.perf_counter() - began
            build._build = timed_build
        return lambda: dict(seen)


def _line_of(exc: BaseException, filename: str) -> str:
    """' (line N of the kernel)' for the innermost frame of the candidate's module."""
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return f" (line {line} of the kernel)" if line else ""
