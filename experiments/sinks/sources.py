"""Kernel source files as sinks store them: one file per candidate, named by its id."""

from __future__ import annotations

from kernelswarm.search import Candidate

# Keyed by kernel language; the suffix lets an editor (and a person) recognise the file.
SOURCE_SUFFIXES: dict[str, str] = {"cpp": "cpp", "cuda": "cu", "torch-ext": "cpp", "triton": "py"}


def source_file_name(candidate: Candidate) -> str:
    """``<candidate id>.<suffix>``; a language this table does not know is stored as ``.txt``."""
    return f"{candidate.id}.{SOURCE_SUFFIXES.get(candidate.language, 'txt')}"
