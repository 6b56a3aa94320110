"""What every layer knows about a kernel language, stated once: ``LanguageSpec``.

A spec is a frozen description: the language's name, the file suffixes its sources carry, the
tags of the fenced blocks a model answers in, the devices it runs on, how the task's launcher
passes arguments, how knobs reach the kernel, whether a kernel compiles at its first call, how a
dispatch kernel picks its route, where Inductor writes a start in it, and how it is exported to
FlashInfer-Trace. The task loader, the configuration schema,
the command line, the sinks and the LLM prompts all read it; ``kernelswarm.evaluators``
implements the building and running of each language (one ``KernelLanguage`` class per spec).

Adding a language is one ``LanguageSpec`` in ``SPECS`` below, one ``KernelLanguage`` class
that refers to it, and a task's ``KERNELS`` entry (docs/architecture.md, "Adding a kernel
language").
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any


class Syntax(enum.Enum):
    """The source's syntax: what comments look like and whether entry points have C linkage."""

    CPP = "c++"  # C or C++ (CUDA C++ included): entry points are functions with C linkage
    PYTHON = "python"

    @property
    def comment(self) -> str:
        """The line-comment prefix."""
        return "//" if self is Syntax.CPP else "#"


class KnobStyle(enum.Enum):
    """How a knob value reaches the kernel."""

    MACROS = "macros"  # -DNAME=VALUE on the compiler's command line; `#ifndef NAME` defaults
    KEYWORDS = "keywords"  # keyword arguments of the entry point, passed on as tl.constexpr


class Dispatch(enum.Enum):
    """How a dispatch kernel (search/dispatch.py: one source, a knob setting per shape) picks
    its route, if the language has one (agents/builtin/dispatch_source.py composes them)."""

    ENTRY_POINT = "entry-point"  # the composed file's own C entry point picks by its sizes
    LAUNCH = "launch"  # the evaluator picks from the launched shape, before the task's launcher
    NONE = "none"  # no dispatch kernel is composed in this language


class Arguments(enum.Enum):
    """What the task's launcher passes to the compiled entry point."""

    CTYPES = "ctypes"  # raw pointers and scalars, typed by the kernel entry's ``argtypes``
    CUDA_LAUNCH = "cuda-launch"  # fn(grid, block, *args): tensors' pointers, ints, floats
    TENSORS = "tensors"  # torch tensors and Python numbers, as to any Python function


# The kinds a cpp entry point's ``argtypes`` may list, in the order the message names them.
ARGUMENT_KINDS = ("ptr", "i64", "i32", "f32", "f64")


class UnknownLanguage(ValueError):
    """A language name or file suffix no spec claims; the message lists those known."""


@dataclass(frozen=True, kw_only=True)
class LanguageSpec:
    """One kernel language as the whole project sees it (see the module docstring).

    Every field but the last two is required, so a new language states each fact; a fact that
    code elsewhere keys on a language's name belongs here as a field instead.
    """

    name: str
    suffixes: tuple[str, ...]  # file suffixes of its sources, lower case; the first is canonical
    fence_tags: tuple[str, ...]  # tags of a model's code block; the first is the one prompts use
    devices: tuple[str, ...]  # device kinds it runs on: "cpu", "cuda"
    syntax: Syntax
    knobs: KnobStyle
    arguments: Arguments
    knob_guide: str  # how knobs and the build work, in a sentence or three, for people and prompts
    # Device kinds on which a loaded kernel compiles at its first call, running a compiler
    # process inside the sandbox (Triton's ptxas on a GPU; its CPU interpreter compiles nothing).
    jit_devices: tuple[str, ...]
    dispatch: Dispatch  # how a dispatch kernel in this language picks its route, if it has one
    # The device kind on which torch.compile's Inductor writes code in this language, so that a
    # starting kernel can be generated from it (evaluators/inductor/inductor_start.py); None: none.
    inductor_device: str | None
    # FlashInfer-Trace: the solution's ``spec.language`` and ``spec.dependencies`` when a kernel
    # in this language is exported (experiments/flashinfer/export.py); None and (): not exported.
    flashinfer_language: str | None
    flashinfer_dependencies: tuple[str, ...]
    # False where a file's suffix alone must not pick this language (torch-ext sources are .cpp
    # files, and a .cpp file is the cpp language unless the user says otherwise).
    claims_suffixes: bool = True
    compile_timeout_s: float = 60.0  # a build limit its compiler fits in on a loaded machine

    @property
    def suffix(self) -> str:
        """The canonical suffix (with its dot): how a stored source file of this language ends."""
        return self.suffixes[0]

    @property
    def fence_tag(self) -> str:
        """The tag prompts put on this language's code blocks."""
        return self.fence_tags[0]

    @property
    def launcher(self) -> str:
        """The task's launch function for this language: ``launch_cpp``, ``launch_torch_ext``."""
        return "launch_" + self.name.replace("-", "_")

    def runs_on(self, device: str) -> bool:
        """Whether the language runs on ``device`` ("cpu", "cuda" or "cuda:N")."""
        return device.split(":")[0] in self.devices

    def compiles_at_first_call(self, device: str) -> bool:
        """Whether a kernel loaded on ``device`` runs a compiler process at its first call."""
        return device.split(":")[0] in self.jit_devices

    def check_kernel_entry(self, entry: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` naming the key when a task's ``KERNELS[name]`` entry lacks what
        this language's launcher convention needs (the cpp entry's ``argtypes``)."""
        if self.arguments is not Arguments.CTYPES:
            return
        kinds = entry.get("argtypes")
        if not isinstance(kinds, (list, tuple)) or not kinds:
            raise ValueError(f"KERNELS[{self.name!r}] needs 'argtypes', a non-empty list of the "
                             f"entry point's parameters in order, each one of "
                             f"{', '.join(ARGUMENT_KINDS)}; got {kinds!r}")
        unknown = [k for k in kinds if k not in ARGUMENT_KINDS]
        if unknown:
            raise ValueError(f"KERNELS[{self.name!r}]['argtypes'] has unknown kinds {unknown}; "
                             f"allowed: {', '.join(ARGUMENT_KINDS)}")


_MACRO_GUIDE = ("Knobs are compile-time macros: each knob NAME is passed as -DNAME=VALUE with one "
                "of its declared values (the first is the default). Guard each with "
                "`#ifndef NAME` / `#define NAME <default>` / `#endif` so the file also builds "
                "alone.")

SPECS: Mapping[str, LanguageSpec] = MappingProxyType({spec.name: spec for spec in (
    LanguageSpec(
        name="cpp", suffixes=(".cpp", ".cc", ".cxx"), fence_tags=("cpp", "c++", "cc", "cxx", "c"),
        devices=("cpu",), syntax=Syntax.CPP, knobs=KnobStyle.MACROS, arguments=Arguments.CTYPES,
        jit_devices=(), dispatch=Dispatch.ENTRY_POINT, inductor_device="cpu",
        flashinfer_language="cpp", flashinfer_dependencies=(),
        knob_guide=_MACRO_GUIDE + " The kernel is compiled by g++ -O3 into a shared library and "
        "called through ctypes on raw pointers; it runs on one CPU thread (no threads, no "
        "OpenMP)."),
    LanguageSpec(
        name="cuda", suffixes=(".cu",), fence_tags=("cuda", "cu", "cpp", "c++"),
        devices=("cuda",), syntax=Syntax.CPP, knobs=KnobStyle.MACROS,
        arguments=Arguments.CUDA_LAUNCH, jit_devices=(), dispatch=Dispatch.LAUNCH,
        inductor_device=None, flashinfer_language=None, flashinfer_dependencies=(),
        knob_guide=_MACRO_GUIDE + " The file is compiled by NVRTC: `extern \"C\" __global__` "
        "kernels, no host code, `long long` instead of int64_t. The task's launcher picks grid "
        "and block, and may read knob values."),
    LanguageSpec(
        name="torch-ext", suffixes=(".cpp",), fence_tags=("cpp", "c++", "cuda"),
        devices=("cpu", "cuda"), syntax=Syntax.CPP, knobs=KnobStyle.MACROS,
        arguments=Arguments.TENSORS, jit_devices=(), dispatch=Dispatch.NONE,
        inductor_device=None, flashinfer_language=None, flashinfer_dependencies=(),
        claims_suffixes=False,
        compile_timeout_s=600.0,  # load_inline compiles the torch headers: about a minute
        knob_guide=_MACRO_GUIDE + " The file is a PyTorch C++/CUDA extension built with "
        "load_inline; the task's launcher calls the entry point with tensors."),
    LanguageSpec(
        name="triton", suffixes=(".py",), fence_tags=("python", "py"), devices=("cpu", "cuda"),
        syntax=Syntax.PYTHON, knobs=KnobStyle.KEYWORDS, arguments=Arguments.TENSORS,
        jit_devices=("cuda",), dispatch=Dispatch.NONE, inductor_device="cuda",
        flashinfer_language="triton", flashinfer_dependencies=("torch", "triton"),
        knob_guide="Knobs reach the entry point as keyword arguments on every call (declare "
        "each with a default, so the file also runs alone) and are passed to @triton.jit "
        "kernels as tl.constexpr parameters. The entry point is a plain Python function that "
        "launches them."),
    LanguageSpec(
        name="cute", suffixes=(".cu",), fence_tags=("cute", "cuda", "cu", "c++", "cpp"),
        devices=("cuda",), syntax=Syntax.CPP, knobs=KnobStyle.MACROS,
        arguments=Arguments.CUDA_LAUNCH, jit_devices=(), dispatch=Dispatch.LAUNCH,
        inductor_device=None, flashinfer_language=None, flashinfer_dependencies=(),
        claims_suffixes=False,  # a .cu file is the cuda language unless the user says cute
        compile_timeout_s=180.0,  # CuTe's templates: seconds for a copy kernel, more for MMA
        knob_guide=_MACRO_GUIDE + " The file is CUDA C++ written with CuTe (`#include "
        "<cute/tensor.hpp>`, CUTLASS 4's headers: layouts, tensors, tiled copies, MMA atoms), "
        "compiled by NVRTC for the GPU's arch-specific target (sm_90a on Hopper: WGMMA and "
        "TMA instructions), functions without an execution space compiled as device code: "
        "`extern \"C\" __global__` kernels, no host code, `long long` for 64-bit sizes. The "
        "task's launcher picks grid, block and shared memory, and may read knob values."),
)})

LANGUAGES: tuple[str, ...] = tuple(SPECS)


def language_spec(name: str) -> LanguageSpec:
    """The spec of the language called ``name``; ``UnknownLanguage`` lists the known ones."""
    try:
        return SPECS[name]
    except KeyError:
        raise UnknownLanguage(f"unknown kernel language {name!r}; known: "
                              f"{', '.join(LANGUAGES)}") from None


def _suffix_owners() -> dict[str, LanguageSpec]:
    owners: dict[str, LanguageSpec] = {}
    for spec in SPECS.values():
        for suffix in spec.suffixes if spec.claims_suffixes else ():
            if suffix in owners:  # a table that could not pick one language: a bug, said early
                raise AssertionError(f"suffix {suffix} is claimed by both "
                                     f"{owners[suffix].name} and {spec.name}")
            owners[suffix] = spec
    return owners


SUFFIX_LANGUAGES: Mapping[str, LanguageSpec] = MappingProxyType(_suffix_owners())


def spec_for_suffix(suffix: str) -> LanguageSpec:
    """The language a file ending in ``suffix`` (".cu", with its dot) is written in;
    ``UnknownLanguage`` lists the suffixes known."""
    try:
        return SUFFIX_LANGUAGES[suffix.lower()]
    except KeyError:
        known = ", ".join(f"{s} -> {spec.name}" for s, spec in SUFFIX_LANGUAGES.items())
        raise UnknownLanguage(f"no kernel language is written in {suffix!r} files; known: "
                              f"{known}") from None


def source_suffix(language: str) -> str:
    """The canonical suffix of ``language``'s sources; ``.txt`` for a language without a spec
    (a record written by another version of kernelswarm stays readable)."""
    spec = SPECS.get(language)
    return spec.suffix if spec is not None else ".txt"
