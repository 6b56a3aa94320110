"""Device code built before a candidate's evaluation, off the GPU: the judge's side.

A Triton candidate's kernels compile at their first call, for each specialisation, inside the
runner, on the GPU's critical path (seconds a candidate: the MLIR pipeline, ptxas, a C compiler
for each launcher). ``Prebuilder`` compiles them beforehand, where the candidate is built (a
lineage's compile pool, or the judge on a build it finds missing): a process of the runner's
OS isolation with no device (evaluators/runner/prebuild.py) compiles every kernel the
candidate's entry point launches on every shape the judge will call it on (tuning, held-out and
extra checks) for the GPU's target, into a Triton cache folder kept beside the artifact:

    <cache_dir>/<artifact key>.aot-<tag>/      Triton's cache layout (<hash>/<files>), report.json
    <cache_dir>/<artifact key>.aot-<tag>.error.txt   why it could not be built (not retried)

``tag`` hashes what the compiled code depends on besides the source: Triton's version, the
compute capability, the task folder's content and the shapes. The folder is published whole
(built in a temporary folder, then renamed), holding only regular files two levels down; the
runner of the same candidate gets a copy as its private Triton cache (``RunnerProcess.
stage_tree``), so what a candidate's build process wrote reaches that candidate alone. Where a
kernel or shape was not built ahead, Triton compiles it at the first call as before: the build
ahead saves time and never decides anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ...search import Candidate
from ..baselines.baselines import _version, task_content_hash
from ..languages.cuda import detect_cuda_arch
from ..languages.triton_aot import capability_of
from ..sandbox.isolation import isolated_command
from ..settings import EvaluatorSettings
from .jit_cache import copy_tree, relocate_groups
from .runner_process import runner_environment

PREBUILD_MODULE = "kernelswarm.evaluators.runner.prebuild"
FORMAT = "triton-aot-1"  # bump when the folder's layout changes
AHEAD_TIMEOUTS = 4
BUILD_WORKERS = 4
_LOG_TAIL = 1500


@dataclass(frozen=True)
class Prebuilt:
    """The outcome of building a candidate's device code ahead: the folder (None where
    nothing was built, with ``note`` saying why), the seconds this call spent, and whether it
    was found built already."""

    folder: Path | None
    seconds: float
    cached: bool = False
    note: str = ""


class Prebuilder:
    """Builds candidates' device code ahead for one evaluator's task, language and settings."""

    def __init__(self, task: Any, language: Any, settings: EvaluatorSettings,
                 cache_root: Path) -> None:
        self.task = task
        self.language = language
        self.settings = settings
        self.cache_root = Path(cache_root)
        self.wanted = settings.builds_ahead(language.name)
        self._tag: str | None = None
        self._capability: int | None = None
        self._unavailable = ""

    def shapes(self) -> list[dict[str, Any]]:
        """Every shape the judge calls a candidate on."""
        shapes = [dict(s) for s in self.task.tuning_shapes]
        if self.settings.check_heldout:
            shapes += [dict(s) for s in self.task.heldout_shapes]
        shapes += [dict(c["shape"]) for c in self.settings.extra_checks]
        return list({json.dumps(s, sort_keys=True): s for s in shapes}.values())

    def _target(self) -> tuple[int, str] | None:
        """(compute capability, folder tag), or None where no target is known."""
        if self._tag is None and not self._unavailable:
            try:
                self._capability = capability_of(self.settings.cuda_arch or detect_cuda_arch())
            except Exception as exc:  # noqa: BLE001 - no GPU named, none to detect
                self._unavailable = f"no target to build for: {exc}"
                return None
            described = [FORMAT, _version("triton"), self._capability,
                         task_content_hash(self.task), self.shapes()]
            self._tag = hashlib.sha256(json.dumps(described, sort_keys=True).encode()
                                       ).hexdigest()[:16]
        if self._tag is None or self._capability is None:
            return None
        return self._capability, self._tag

    def prebuild(self, candidate: Candidate, artifact: Path, build: bool = True,
                 deadline: float | None = None) -> Prebuilt:
        """The candidate's kernels built ahead, or found built (``build`` False: only looked
        up; an evaluation that finds none leaves the compiling to the kernel's first calls,
        which cost the GPU no more than this would); never raises for what the candidate
        does. A build still running at ``deadline`` (Unix time) is stopped, and nothing of
        it is kept: a later build of the candidate starts again."""
        began = time.perf_counter()
        if not self.wanted:
            return Prebuilt(None, 0.0, note="nothing to build ahead for this language/device")
        target = self._target()
        if target is None:
            return Prebuilt(None, time.perf_counter() - began, note=self._unavailable)
        capability, tag = target
        folder = artifact.with_name(f"{artifact.stem}.aot-{tag}")
        failed = _failed_note(folder)
        if folder.is_dir():
            return Prebuilt(folder, time.perf_counter() - began, cached=True)
        if failed.is_file():
            return Prebuilt(None, time.perf_counter() - began, cached=True,
                            note=failed.read_text()[:_LOG_TAIL])
        if not build:
            return Prebuilt(None, time.perf_counter() - began, note="not built ahead")
        note = self._build(candidate, artifact, capability, folder, deadline)
        return Prebuilt(folder if folder.is_dir() else None, time.perf_counter() - began,
                        note=note)

    def _build(self, candidate: Candidate, artifact: Path, capability: int, folder: Path,
               deadline: float | None = None) -> str:
        failed = _failed_note(folder)
        scratch = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".aot-"))
        try:
            staged = scratch / artifact.name
            shutil.copyfile(artifact, staged)
            (scratch / "triton").mkdir()
            settings = {**asdict(self.settings), "cache_dir": str(self.settings.cache_dir)}
            request = {"task": str(self.task.path), "language": self.language.name,
                       "settings": settings, "artifact": str(staged), "entry": candidate.entry,
                       "spec": candidate.spec_dict, "shapes": self.shapes(),
                       "capability": capability, "workers": build_workers()}
            (scratch / "request.json").write_text(json.dumps(request, default=str))
            done, log = self._run(scratch, deadline)
            report = scratch / "report.json"
            if done != 0 or not report.is_file():
                if done is None:  # a limit that a less loaded machine may not reach
                    return f"not built ahead: {log}"
                _write_atomically(failed, f"the build ahead failed (exit {done}):\n{log}")
                return failed.read_text()[:_LOG_TAIL]
            found = json.loads(report.read_text())
            if not found.get("kernels"):  # nothing the runner could use
                _write_atomically(failed, "no kernel was built ahead: "
                                  + json.dumps(found.get("failed", {}))[:_LOG_TAIL])
                return failed.read_text()[:_LOG_TAIL]
            built = scratch / "built"
            built.mkdir()
            copy_tree(scratch / "triton", built)
            shutil.copyfile(report, built / "report.json")
            try:
                os.replace(built, folder)
            except OSError:  # another process published the same folder first
                return ""
            relocate_groups(folder)  # its members where they now are
            return ""
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _run(self, scratch: Path, deadline: float | None = None) -> tuple[int | None, str]:
        """Run the build process in ``scratch``, until its limit or ``deadline`` (Unix time),
        whichever comes first; (exit status or None when stopped, log tail)."""
        env = {**runner_environment(), "CUDA_VISIBLE_DEVICES": "",
               "TRITON_CACHE_DIR": str(scratch / "triton")}
        argv, options = isolated_command(
            [sys.executable, "-m", PREBUILD_MODULE, str(scratch / "request.json")], scratch)
        log_path = scratch / "prebuild.log"
        # every kernel and launcher of every shape, one after the other: several builds' worth
        limit = AHEAD_TIMEOUTS * self.settings.compile_timeout_s
        left = limit if deadline is None else min(limit, max(0.0, deadline - time.time()))
        with open(log_path, "wb") as log:
            process = subprocess.Popen(argv, cwd=scratch, env=env, stdin=subprocess.DEVNULL,
                                       stdout=log, stderr=subprocess.STDOUT,
                                       **{"start_new_session": True, **options})
            try:
                code: int | None = process.wait(timeout=left)
            except subprocess.TimeoutExpired:
                code = None
            finally:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except OSError:
                    pass
                process.wait()
        tail = log_path.read_text(errors="replace")[-_LOG_TAIL:]
        if code is None and left < limit:
            return None, f"the build ahead was stopped at its deadline after {left:.0f} s"
        if code is None:
            return None, (f"the build ahead took more than {limit:g} s ({AHEAD_TIMEOUTS} x "
                          f"compile_timeout_s)")
        return code, tail


def _failed_note(folder: Path) -> Path:
    """Where a build ahead that failed says why, beside the folder it would have made."""
    return folder.with_name(folder.name + ".error.txt")


def build_workers() -> int:
    """Processes one build ahead compiles with: a share of this machine's CPUs (a GPU host
    has 16 a GPU; the compile pool's lineages build side by side), none on a small machine."""
    return max(1, min(BUILD_WORKERS, len(os.sched_getaffinity(0)) // 4))


def _write_atomically(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
