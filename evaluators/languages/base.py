"""The kernel-language interface: screen rules, build to an artifact, load in the sandbox.

A ``KernelLanguage`` is stateless and picklable, so that a compile pool can build with it in
another process. The evaluator drives it in two places:

- the parent (or a compile pool): ``screen_rules``, ``cache_key_parts`` and ``build``; ``build``
  runs untrusted *source* through a compiler but never runs candidate code;
- the sandbox child: ``load`` (which runs candidate code: library constructors, JIT, ...),
  ``unload`` and ``synchronize``.

Correctness, timing and the sandbox are language-agnostic; a language adds only what is above.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ...search import Candidate, LanguageSpec
from ..environment import scrubbed_environment
from .screen import ScreenRule, SyntaxRule


class BuildError(Exception):
    """A candidate that does not build; ``log`` is the trimmed compiler output.

    ``cacheable`` is False for outcomes that may differ on a retry (a compiler timeout under load);
    ``rejected`` is True when the build worked but its product uses what a kernel may not (a
    REJECTED verdict rather than a COMPILE_ERROR).
    """

    def __init__(self, log: str, *, cacheable: bool = True, rejected: bool = False) -> None:
        super().__init__(log)
        self.log = log
        self.cacheable = cacheable
        self.rejected = rejected


@dataclass(frozen=True)
class LoadedKernel:
    """A kernel loaded in the sandbox: ``fn`` is passed to the task's launcher; ``handle`` is the
    language's own (a library handle, a module) for ``unload``."""

    fn: Any
    handle: Any = None


class LoadError(Exception):
    """A built artifact that cannot be loaded or lacks its entry point (a candidate fault)."""


class KernelLanguage(ABC):
    """One kernel language: how its sources are screened, built, loaded and called.

    A subclass sets ``language_spec``, the language's ``LanguageSpec`` (``SPECS[name]``);
    ``name`` and ``devices`` are read from it. (A task's kernel entry, which ``check_spec`` and
    ``load`` receive as ``spec``, is another thing: argtypes and such of one task.)
    """

    language_spec: ClassVar[LanguageSpec]
    name: ClassVar[str]
    devices: ClassVar[tuple[str, ...]]  # device kinds it runs on: "cpu", "cuda"
    artifact_suffix: ClassVar[str]
    screen_rules: ClassVar[tuple[ScreenRule | SyntaxRule, ...]]
    # True where the kernel brings host code that runs in the sandbox around its launches
    # (Python, or C++ that can call ATen): every call then runs under the integrity guard.
    host_code: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "language_spec" in cls.__dict__:
            cls.name, cls.devices = cls.language_spec.name, cls.language_spec.devices

    @classmethod
    def from_settings(cls, settings: Any) -> KernelLanguage:
        """The language as ``EvaluatorSettings`` configure it (most languages have no options)."""
        return cls()

    @property
    def launcher(self) -> str:
        """Name of the task's launch function for this language (``launch_cpp``, ...)."""
        return self.language_spec.launcher

    def check_spec(self, entry: str, spec: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` naming the key when a task's kernel spec cannot be used."""
        self.language_spec.check_kernel_entry(spec)

    @abstractmethod
    def cache_key_parts(self, candidate: Candidate) -> Sequence[str]:
        """Everything besides source and knob values that changes the artifact (flags, compiler)."""

    @abstractmethod
    def build(self, candidate: Candidate, workdir: Path, artifact: Path, timeout_s: float) -> None:
        """Build ``candidate`` into ``artifact`` (inside ``workdir``); raise ``BuildError``."""

    @abstractmethod
    def load(self, artifact: Path, entry: str, spec: Mapping[str, Any]) -> LoadedKernel:
        """In the sandbox: load ``artifact``; raise ``LoadError`` when the entry is unusable."""

    def for_shape(self, kernel: LoadedKernel, shape: Mapping[str, Any]) -> Any:
        """In the sandbox: what the task's launcher receives as ``fn`` for a call of ``shape``.
        A dispatch kernel (search/dispatch.py) that the launcher must see per route answers
        with that route; otherwise ``kernel.fn``."""
        return kernel.fn

    def unload(self, kernel: LoadedKernel) -> None:  # noqa: B027 - optional
        """In the sandbox: release a kernel returned by ``load``."""

    def synchronize(self) -> None:  # noqa: B027 - CPU kernels are synchronous
        """In the sandbox: wait until launched work has finished (a no-op on CPU)."""

    def sandbox_environment(self) -> dict[str, str]:
        """Variables the sandbox sets in its own environment before loading any kernel."""
        return {}

    def source_file(self, kernel: LoadedKernel) -> str | None:
        """In the sandbox: the file the kernel's host code runs from, to name its lines."""
        return None

    def resources(self, kernel: LoadedKernel) -> dict[str, Any]:
        """In the sandbox: what the loaded kernel uses (registers, shared memory, spills, launch
        geometry), for ``Evaluation.resources``; JSON-able. Empty where nothing is known."""
        return {}

    def watch_compiles(self) -> Callable[[], dict[str, float]] | None:
        """In the sandbox, before the candidate loads: for a language that compiles at a
        kernel's first call, a function returning what it compiled since (``{"compiles",
        "seconds"}``); None where nothing compiles there."""
        return None


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_MACRO_VALUE = re.compile(r"[A-Za-z0-9_.+-]+\Z")


def macro_definitions(knobs: Mapping[str, Any]) -> list[str]:
    """``-DNAME=VALUE`` for each knob (booleans as 1/0); a malformed knob raises ``BuildError``."""
    flags = []
    for name, value in sorted(knobs.items()):
        if isinstance(value, bool):
            value = int(value)
        text = str(value)
        if not _IDENTIFIER.match(name) or not _MACRO_VALUE.match(text):
            raise BuildError(f"knob {name}={value!r} cannot be a macro definition: names must be "
                             f"C identifiers and values numbers or identifiers")
        flags.append(f"-D{name}={text}")
    return flags


# A compiler (or the program it drives, e.g. cc1plus) killed by a signal from outside the build:
# the drivers report a child's death on a line of their own (g++, older g++, nvcc; a source's
# ``#error`` cannot start one), and a driver killed itself exits with a negative status.
_KILLED_CHILD = re.compile(r"^[\w+.-]+: (fatal error: \w+ signal terminated program"
                           r"|internal compiler error: Killed \(program)"
                           r"|^nvcc error\s*: '\w+' died due to signal", re.MULTILINE)


def run_compiler(argv: Sequence[str], cwd: Path, timeout_s: float) -> tuple[int, str]:
    """Run a compiler in its own process group with a scrubbed environment and a time limit.

    Returns (exit status, combined output); a timeout kills the whole group (the driver's
    children, e.g. cc1plus, included) and raises a non-cacheable ``BuildError``. A compiler
    killed by a signal that this build did not send (the out-of-memory killer; the worker's
    own shutdown, whose first step kills its children) says nothing about the source: it is run
    once more within the time left, and a second such death raises a non-cacheable
    ``BuildError`` rather than a verdict that a cache would keep.
    """
    deadline = time.monotonic() + timeout_s
    status, log = _compile_once(argv, cwd, timeout_s, timeout_s)
    if not _killed(status, log):
        return status, log
    status, log = _compile_once(argv, cwd, max(deadline - time.monotonic(), 1.0), timeout_s)
    if _killed(status, log):
        raise BuildError(f"the compiler was killed by a signal twice, not by this build's time "
                         f"limit (out of memory?); nothing was cached, a later build may "
                         f"succeed\n{_signal_text(status, log)}", cacheable=False)
    return status, log


def _killed(status: int, log: str) -> bool:
    return status < 0 or (status != 0 and _KILLED_CHILD.search(log) is not None)


def _signal_text(status: int, log: str) -> str:
    if status < 0:
        try:
            return f"it exited on {signal.Signals(-status).name}"
        except ValueError:
            return f"it exited on signal {-status}"
    found = _KILLED_CHILD.search(log)
    line = next((line for line in log.splitlines() if found and found.group(0) in line), "")
    return line.strip()


def _compile_once(argv: Sequence[str], cwd: Path, timeout_s: float,
                  limit_s: float) -> tuple[int, str]:
    try:
        proc = subprocess.Popen(list(argv), cwd=cwd, env=scrubbed_environment(),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as exc:
        raise RuntimeError(f"cannot run the compiler {argv[0]!r}: {exc}") from exc
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        raise BuildError(f"the compiler ran past compile_timeout_s={limit_s:g} s and was "
                         f"killed; simplify templates/unrolling or raise the limit",
                         cacheable=False) from None
    return proc.returncode, out.decode(errors="replace")
