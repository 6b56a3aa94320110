"""Kernel languages the evaluators can build and run, by name."""

from __future__ import annotations

from .base import BuildError, KernelLanguage, LoadedKernel, LoadError
from .cpp import CppLanguage
from .torch_ext import TorchExtLanguage
from .triton import TritonLanguage

_LANGUAGES: dict[str, type[KernelLanguage]] = {CppLanguage.name: CppLanguage,
                                               TritonLanguage.name: TritonLanguage,
                                               TorchExtLanguage.name: TorchExtLanguage}


def get_language(name: str) -> KernelLanguage:
    """The language called ``name``; ``ValueError`` lists the ones implemented."""
    if name not in _LANGUAGES:
        raise ValueError(f"kernel language {name!r} is not implemented by the evaluators; "
                         f"implemented: {', '.join(sorted(_LANGUAGES))}")
    return _LANGUAGES[name]()


__all__ = ["BuildError", "CppLanguage", "KernelLanguage", "LoadError", "LoadedKernel",
           "TorchExtLanguage", "TritonLanguage", "get_language"]
