"""Compile cache: artifacts by content hash, shared by every process on a machine.

Layout of ``cache_dir``: ``<key><suffix>`` is a built artifact (``.so`` for cpp);
``<key>.error.txt`` is the trimmed log of a build that failed for good (a compiler timeout is not
recorded, since it may pass when the machine is less loaded); ``<key>.rejected.txt`` the reason a
built library was refused (a REJECTED verdict: it imports what a kernel may not). The key is a
SHA-256 over (language, source, knob values, the language's flags and compiler identity).
Several processes (a compile pool, evaluation workers) may build the same key at once: each
builds in its own temporary folder inside ``cache_dir`` and publishes with ``os.replace``, which
is atomic, so a reader sees either no file or a whole one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ...search import Candidate, CompileResult
from .base import BuildError, KernelLanguage


@dataclass(frozen=True)
class Build:
    """A compile result and, when it succeeded, the artifact's path; ``prebuilt``: the folder
    of device code built ahead for it, where there is one (evaluators/judge/prebuild.py)."""

    result: CompileResult
    artifact: Path | None
    prebuilt: Path | None = None


def cache_key(language: KernelLanguage, candidate: Candidate) -> str:
    """Content hash of everything that determines the artifact."""
    payload = json.dumps([language.name, candidate.source, sorted(candidate.knob_values.items()),
                          list(language.cache_key_parts(candidate))], default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def _write_atomically(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


class CompileCache:
    """Builds candidates into ``root`` once per content hash."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def build(self, language: KernelLanguage, candidate: Candidate, timeout_s: float) -> Build:
        """Build ``candidate`` or reuse its artifact; a failing build is a result, not a raise."""
        started = time.perf_counter()
        key = cache_key(language, candidate)
        artifact = self.root / f"{key}{language.artifact_suffix}"
        failure = self.root / f"{key}.error.txt"
        refusal = self.root / f"{key}.rejected.txt"
        if artifact.exists():
            return Build(self._result(candidate, started, ok=True, cached=True,
                                      binary=binary_hash(artifact, candidate)), artifact)
        if failure.exists():
            log = failure.read_text()
            return Build(self._result(candidate, started, ok=False, cached=True, log=log), None)
        if refusal.exists():
            return Build(self._result(candidate, started, ok=False, cached=True,
                                      log=refusal.read_text(), rejected=True), None)
        self.root.mkdir(parents=True, exist_ok=True)
        workdir = Path(tempfile.mkdtemp(dir=self.root, prefix=".build-"))
        try:
            built = workdir / artifact.name
            language.build(candidate, workdir, built, timeout_s)
            os.replace(built, artifact)
        except BuildError as exc:
            if exc.cacheable:
                _write_atomically(refusal if exc.rejected else failure, exc.log)
            return Build(self._result(candidate, started, ok=False, log=exc.log,
                                      rejected=exc.rejected), None)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        return Build(self._result(candidate, started, ok=True,
                                  binary=binary_hash(artifact, candidate)), artifact)

    @staticmethod
    def _result(candidate: Candidate, started: float, *, ok: bool, cached: bool = False,
                log: str = "", binary: str = "", rejected: bool = False) -> CompileResult:
        return CompileResult(candidate_id=candidate.id, ok=ok,
                             seconds=time.perf_counter() - started, log=log, cached=cached,
                             binary=binary, rejected=rejected)


def binary_hash(artifact: Path, candidate: Candidate) -> str:
    """Hash of the artifact's bytes and the candidate's knob values (a launcher may read knobs
    at run time, so the same machine code with other knobs may run differently)."""
    digest = hashlib.sha256()
    try:
        with open(artifact, "rb") as built:
            for chunk in iter(lambda: built.read(1 << 20), b""):
                digest.update(chunk)
    except OSError:  # a directory or a vanished file: no identity to share
        return ""
    digest.update(json.dumps(sorted(candidate.knobs), default=str).encode())
    return digest.hexdigest()[:24]
