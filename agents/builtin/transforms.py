"""The library of named source transformations, keyed by kernel language.

A plan move ``"rewrite:<name>"`` names one of these; the built-in coder applies it and the
built-in planner asks it whether it applies. Adding a transformation is adding an instance to
``_LIBRARY``: it is registered under every language it declares.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from .cpp_fast_exp import FastExp
from .cpp_rewrites import Restrict, Simd, TargetIsa, Unroll
from .cuda_geometry import RowsPerBlock, SplitRows
from .cuda_rewrites import CudaRestrict, CudaUnroll, FastMath
from .cuda_structures import Stream, WarpRows
from .cuda_vectorize import Vectorize
from .cute_rewrites import CpAsyncL1, Swizzle
from .transformation import Transformation

_LIBRARY: tuple[Transformation, ...] = (
    Restrict(), FastExp(), Simd(), Unroll(), TargetIsa(),  # cpp
    Vectorize(), SplitRows(), RowsPerBlock(), CudaRestrict(), CudaUnroll(), FastMath(),  # cuda
    WarpRows(), Stream(),  # cuda kernel structures: whole kernels for a contract
    Swizzle(), CpAsyncL1(),  # cute
)


def _index(library: tuple[Transformation, ...]) -> Mapping[str, Mapping[str, Transformation]]:
    by_language: dict[str, dict[str, Transformation]] = {}
    for transformation in library:
        for language in transformation.languages:
            named = by_language.setdefault(language, {})
            if transformation.name in named:
                raise ValueError(f"two transformations named {transformation.name!r} for "
                                 f"language {language!r}")
            named[transformation.name] = transformation
    return MappingProxyType({lang: MappingProxyType(named) for lang, named in by_language.items()})


TRANSFORMATIONS: Mapping[str, Mapping[str, Transformation]] = _index(_LIBRARY)
"""language -> transformation name -> transformation (read-only)."""


def transformations_for(language: str) -> tuple[Transformation, ...]:
    """The transformations for ``language``, in library order; empty for a language with none."""
    return tuple(TRANSFORMATIONS.get(language, {}).values())


def find_transformation(language: str, name: str) -> Transformation | None:
    """The transformation called ``name`` for ``language``, or None."""
    return TRANSFORMATIONS.get(language, {}).get(name)
