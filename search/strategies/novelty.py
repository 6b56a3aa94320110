"""Novelty rejection: a candidate too close to one already judged is not judged.

Closeness is measured on the source as a compiler would see it, not as written: comments and
whitespace are dropped and the text is cut into tokens (identifiers, numbers, single
punctuation marks); a source is the set of its runs of ``SHINGLE`` consecutive tokens, and the
similarity of two sources is the Jaccard index of those sets (shared runs over all runs). 1.0 is
the same token stream; a renamed variable or a reordered statement lowers it by the runs it
touches. Two candidates are *too close* when their similarity is at least the threshold, they
are of one language and their knob values are equal (candidates that differ only in knob values
are the tuner's to tell apart, not this check's).

A threshold of 1.0 rejects only copies: the same token stream with other comments or layout
(a model that answers with the kernel it was shown, reworded). Below 1.0 it also rejects small
edits, and in a kernel a small edit can be the whole gain: on the quickstart's C++ kernel (about
130-180 tokens) a one-line rewrite of the built-in agent (``__restrict__``, an unrolled loop, a
fast ``expf``) scores 0.93-0.98 against its parent. docs/search.md has the measurement.

Only the coder's new kernels are screened: a repair is meant to stay close to the kernel it
fixes, a tuning trial is the tuner's choice, a starting kernel or an adopted one is judged
anyway. ``Novelty.check`` costs one comparison per judged kernel of the language; a few hundred
kernels take well under a millisecond each.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..candidate import Candidate
from ..roles import REPAIR

SHINGLE = 4  # tokens per run
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/|#(?!\s*(?:include|define|if|ifdef|ifndef|else|"
                       r"elif|endif|undef|pragma))[^\n]*", re.S)
_TOKENS = re.compile(r"[A-Za-z_][A-Za-z_0-9]*|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?[fFuUlL]*|\S")


def shingles(source: str) -> frozenset[tuple[str, ...]]:
    """The source's runs of ``SHINGLE`` tokens, comments and layout left out."""
    tokens = _TOKENS.findall(_COMMENTS.sub(" ", source))
    if len(tokens) < SHINGLE:
        return frozenset({tuple(tokens)})
    return frozenset(tuple(tokens[i:i + SHINGLE]) for i in range(len(tokens) - SHINGLE + 1))


def similarity(a: frozenset[tuple[str, ...]], b: frozenset[tuple[str, ...]]) -> float:
    """The Jaccard index of two shingle sets: 1.0 for the same token stream."""
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


@dataclass(frozen=True)
class Rejection:
    """Why a candidate was not judged: the judged kernel it is too close to."""

    candidate_id: str
    near: str  # the judged candidate's id
    similarity: float

    @property
    def message(self) -> str:
        return (f"not judged: {self.similarity:.1%} like {self.near}, judged already "
                f"(novelty rejection)")


def screened(candidate: Candidate) -> bool:
    """Whether novelty rejection applies to ``candidate`` (the coder's new kernels)."""
    return candidate.origin.role == "coder" and candidate.origin.move != REPAIR


class Novelty:
    """The judged kernels' shingles, and the check of a new candidate against them."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.rejected: list[Rejection] = []
        # (language, knob values) -> [(candidate id, shingles)] of the judged kernels
        self._judged: dict[tuple[str, tuple], list[tuple[str, frozenset]]] = {}
        self._ids: set[str] = set()

    @property
    def on(self) -> bool:
        return self.threshold > 0

    def judged(self, candidate: Candidate) -> None:
        """Note a judged candidate (whatever its verdict: a failed kernel is known too)."""
        if not self.on or candidate.id in self._ids:
            return
        self._ids.add(candidate.id)
        key = (candidate.language, candidate.knobs)
        self._judged.setdefault(key, []).append((candidate.id, shingles(candidate.source)))

    def check(self, candidate: Candidate) -> Rejection | None:
        """The rejection of a candidate too close to a judged one (counted), or None."""
        if not self.on or not screened(candidate) or candidate.id in self._ids:
            return None
        mine = shingles(candidate.source)
        near, best = "", 0.0
        for other, theirs in self._judged.get((candidate.language, candidate.knobs), ()):
            score = similarity(mine, theirs)
            if score > best:
                near, best = other, score
        if best < self.threshold:
            return None
        rejection = Rejection(candidate.id, near, best)
        self.rejected.append(rejection)
        return rejection
