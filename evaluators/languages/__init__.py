"""Kernel languages the evaluators can build and run, by name, and what builds them: the static
screen, NVRTC and CUDA modules, ELF symbol tables, CUDA errors in words, the compile cache.

The languages and their facts are ``search.language_spec.SPECS``; this package holds one
``KernelLanguage`` class per spec, found by the spec's name. A spec without a class here, or a
class whose spec is not in ``SPECS``, stops the import with the names at fault.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from ...search import SPECS, language_spec
from .base import BuildError, KernelLanguage, LoadedKernel, LoadError
from .cpp import CppLanguage
from .cuda import CudaLanguage
from .cute import CuteLanguage
from .torch_ext import TorchExtLanguage
from .triton import TritonLanguage


def implementations(classes: Iterable[type[KernelLanguage]]
                    ) -> Mapping[str, type[KernelLanguage]]:
    """The classes by their spec's name, in ``SPECS``' order; ``AssertionError`` names each
    spec without a class, each class without a spec in ``SPECS`` and each name taken twice."""
    by_name: dict[str, type[KernelLanguage]] = {}
    for cls in classes:
        name = cls.language_spec.name
        if name in by_name or SPECS.get(name) is not cls.language_spec:
            raise AssertionError(f"{cls.__name__}: its spec {name!r} is not SPECS[{name!r}], or "
                                 f"another class implements it too")
        by_name[name] = cls
    missing = [name for name in SPECS if name not in by_name]
    if missing:
        raise AssertionError(f"no KernelLanguage implements {', '.join(missing)} (in SPECS); "
                             f"add its class to kernelswarm.evaluators.languages")
    return MappingProxyType({name: by_name[name] for name in SPECS})


IMPLEMENTATIONS = implementations((CppLanguage, CudaLanguage, TorchExtLanguage, TritonLanguage,
                                   CuteLanguage))


def get_language(name: str, settings: Any = None) -> KernelLanguage:
    """The language called ``name``, configured by ``settings`` (``EvaluatorSettings``) when
    given; ``UnknownLanguage`` (a ``ValueError``) lists the languages in ``SPECS``."""
    cls = IMPLEMENTATIONS[language_spec(name).name]
    return cls() if settings is None else cls.from_settings(settings)


__all__ = ["IMPLEMENTATIONS", "BuildError", "CppLanguage", "CudaLanguage", "CuteLanguage", "KernelLanguage",
           "LoadError", "LoadedKernel", "TorchExtLanguage", "TritonLanguage", "get_language",
           "implementations"]
