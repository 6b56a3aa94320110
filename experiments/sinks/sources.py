"""Kernel source files as sinks store them: one file per candidate, named by its id."""

from __future__ import annotations

from kernelswarm.search import Candidate, source_suffix


def source_file_name(candidate: Candidate) -> str:
    """``<candidate id><suffix>``, the language's canonical suffix (``LanguageSpec.suffix``), so
    that an editor and a person recognise the file; ``.txt`` for a language without a spec."""
    return f"{candidate.id}{source_suffix(candidate.language)}"
