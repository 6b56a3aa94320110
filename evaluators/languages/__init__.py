"""Kernel languages the evaluators can build and run, by name."""

from __future__ import annotations

from typing import Any

from .base import BuildError, KernelLanguage, LoadedKernel, LoadError
from .cpp import CppLanguage
from .cuda import CudaLanguage
from .torch_ext import TorchExtLanguage
from .triton import TritonLanguage

_LANGUAGES: dict[str, type[KernelLanguage]] = {CppLanguage.name: CppLanguage,
                                               CudaLanguage.name: CudaLanguage,
                                               TritonLanguage.name: TritonLanguage,
                                               TorchExtLanguage.name: TorchExtLanguage}


def get_language(name: str, settings: Any = None) -> KernelLanguage:
    """The language called ``name``, configured by ``settings`` (``EvaluatorSettings``) when
    given; ``ValueError`` lists the ones implemented."""
    if name not in _LANGUAGES:
        raise ValueError(f"kernel language {name!r} is not implemented by the evaluators; "
                         f"implemented: {', '.join(sorted(_LANGUAGES))}")
    cls = _LANGUAGES[name]
    return cls() if settings is None else cls.from_settings(settings)


__all__ = ["BuildError", "CppLanguage", "CudaLanguage", "KernelLanguage", "LoadError",
           "LoadedKernel", "TorchExtLanguage", "TritonLanguage", "get_language"]
