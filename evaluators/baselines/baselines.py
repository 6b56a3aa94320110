"""Baselines a user would pick, per tuning shape: PyTorch eager, ``torch.compile`` specialised
for the shape, and the library kernels (anchors) a task names, each checked against the reference.

``measure_baselines(task, settings)`` measures them in their own trusted process
(evaluators/baselines/baseline_worker.py: no candidate code there, nothing shared with the evaluator's
process) with the candidates' timers and timing settings, or reads them from the cache:
``<cache_dir>/baselines/<key>.json``, the key hashing the task folder's content, the device, the
torch and library versions, the timing settings and whether compile was measured; so ``run``,
``eval`` and ``tune`` of one task on one machine measure them once, whatever the language. The
starting kernel of each language that asks is kept beside them (``starts``): the first is timed
with the baselines; another is timed later with eager alone (``start_only``), seconds rather than
the minutes of compiling every shape in two modes again, and carried in by eager's ratio
(``carried_start``).

``with_baselines`` fills a candidate's ``ShapeResult`` with the baseline times, the best
baseline's name and the speedups, each with the half-width of its 95% confidence interval. The
baselines are measured once, the candidate later, perhaps on a machine busier or quieter than
then: so the worker also times the task's starting kernel with the baselines, and since every
candidate is timed interleaved with that same starting kernel, a baseline's time is carried over
to the candidate's evaluation by the starting kernel's ratio (``baseline_us * start_now_us /
start_then_us``). On a quiet machine the ratio is about 1. On the loaded 2-core development
machine, a run and an eval of one kernel gave speedups over the start of 3.345x and 3.374x but,
as a plain ratio of times to the cached baseline, 0.935x and 1.355x over it; carried over, the
speedup over the best baseline moved with the speedup over the start (a run and four evals:
their ratio 0.314-0.315). The confidence interval includes the four medians' errors.

Anchors: a task's ``ANCHORS = {name: {"module": "liger_kernel.ops.swiglu", "call": "anchor_liger",
"package": "liger-kernel", "devices": ["cuda"]}}``; ``call`` names a function of task.py that
takes the imported module and the inputs and returns the outputs like ``reference``. A library
that is not installed, or an anchor for another device, is skipped with the reason (``skipped``),
never a failure. An anchor whose output disagrees with the reference is reported, not counted.

``torch.compile`` on the CPU (inductor generates and builds C++ with gcc) cost 25-30 s for the
three quickstart shapes and both modes in a fresh process on the 2-core development machine, and
about 3 s with inductor's own cache warm: more than an evaluation takes. It is therefore measured
on a GPU by default and on the CPU only when asked (``KERNELSWARM_BASELINE_COMPILE=1`` or
``compile=True``); the tables say "compile: not measured on cpu" otherwise.
``KERNELSWARM_BASELINE_COMPILE=0`` leaves it out on a GPU too (the GPU tests do, but for those
of the baselines themselves: compiling the 19 shapes of fused_add_rmsnorm took 167 s).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ...search import Z95, ShapeResult, Task, load_task, median_rel_se, speedup_ci
from ..environment import scrubbed_environment
from ..measure.machine import describe_device
from ..measure.timing_protocol import TimingSettings
from ..settings import EvaluatorSettings

EAGER, COMPILE = "eager", "compile"
COMPILE_ENV = "KERNELSWARM_BASELINE_COMPILE"
WORKER_MODULE = "kernelswarm.evaluators.baselines.baseline_worker"
# The worker's allocator keeps freed memory for the next call, as a long-running PyTorch process
# does: with glibc's defaults a reference that allocates its outputs (MiBs) could return them to
# the OS on each free and fault fresh zeroed pages in on each call, a cost a user's process does
# not pay (measured: 7-20 ms instead of 0.5 ms for out = 0.5 * x + y at n = 2^20).
WORKER_ENVIRONMENT = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
                      "MALLOC_TOP_PAD_": str(64 << 20), "PYTHONUNBUFFERED": "1"}
_CPU_THREADS = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


class BaselineError(RuntimeError):
    """The baselines could not be measured (the worker failed); the message has its log."""


@dataclass(frozen=True)
class BaselineTime:
    """One baseline on one shape: median and interquartile range (µs) of ``samples`` timed calls,
    or ``error`` (why there is no time). ``detail``: e.g. the compile mode that was fastest;
    ``first_call_s``: seconds of the first call (compile: tracing and code generation);
    ``configs``: for compile on a GPU, per Triton kernel of the timed code, the launch settings
    Inductor's autotuning kept (what a start generated from compile launches it with)."""

    median_us: float = math.nan
    iqr_us: float = math.nan
    samples: int = 0
    error: str = ""
    detail: str = ""
    first_call_s: float = math.nan
    configs: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.error and self.median_us > 0

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> BaselineTime:
        def number(key: str) -> float:
            value = doc.get(key)
            return math.nan if value is None else float(value)

        configs = {str(k): {str(n): int(v) for n, v in dict(c).items()}
                   for k, c in dict(doc.get("configs") or {}).items()}
        return cls(number("median_us"), number("iqr_us"), int(doc.get("samples") or 0),
                   str(doc.get("error", "")), str(doc.get("detail", "")), number("first_call_s"),
                   configs)


@dataclass(frozen=True)
class BaselineTable:
    """Every baseline of a task on one device: ``shapes[label][name]``; ``skipped[name]`` says
    why a baseline was not measured (e.g. "not installed"). ``key`` is the cache key."""

    task: str
    device: str
    key: str
    timing: TimingSettings
    versions: Mapping[str, str] = field(default_factory=dict)
    shapes: Mapping[str, Mapping[str, BaselineTime]] = field(default_factory=dict)
    skipped: Mapping[str, str] = field(default_factory=dict)
    cached: bool = False
    language: str = ""  # the starting kernel timed with the baselines ("" for none)
    start: Mapping[str, BaselineTime] = field(default_factory=dict)  # per shape

    def get(self, shape: str, name: str) -> BaselineTime:
        return self.shapes.get(shape, {}).get(name, BaselineTime(error="not measured"))

    def best(self, shape: str) -> tuple[str, BaselineTime] | None:
        """The fastest baseline that passed its check on ``shape`` (name, time), or None."""
        timed = [(t.median_us, n, t) for n, t in self.shapes.get(shape, {}).items() if t.ok]
        if not timed:
            return None
        _, name, best = min(timed)
        return name, best

    @property
    def names(self) -> list[str]:
        """Every baseline measured on some shape, eager and compile first."""
        found = {n for row in self.shapes.values() for n in row}
        order = [n for n in (EAGER, COMPILE) if n in found]
        return order + sorted(found - set(order))

    def as_json(self) -> dict[str, Any]:
        from .baseline_worker import _finite

        return _finite({
            "task": self.task, "device": self.device, "key": self.key,
            "timing": self.timing.as_dict(), "versions": dict(self.versions),
            "shapes": {s: {n: t.__dict__ for n, t in row.items()}
                       for s, row in self.shapes.items()},
            "skipped": dict(self.skipped), "language": self.language,
            "start": {s: t.__dict__ for s, t in self.start.items()}})

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], cached: bool = False) -> BaselineTable:
        return cls(task=doc["task"], device=doc["device"], key=doc["key"],
                   timing=TimingSettings.from_dict(doc["timing"]), versions=doc["versions"],
                   shapes={s: {n: BaselineTime.from_json(t) for n, t in row.items()}
                           for s, row in doc["shapes"].items()},
                   skipped=dict(doc["skipped"]), cached=cached,
                   language=str(doc.get("language", "")),
                   start={s: BaselineTime.from_json(t)
                          for s, t in dict(doc.get("start", {})).items()})


# How a baseline is timed, beyond the timing settings; a change measures the tables again.
# Each copy's result held until the copy comes round (baseline_worker.rotating).
MEASURING = "2026-11-30.results-held-per-copy"


def task_content_hash(task: Task) -> str:
    """SHA-256 of every file of the task folder (names and bytes), caches excluded."""
    digest = hashlib.sha256()
    for path in sorted(Path(task.path).rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(task.path)).encode() + b"\0")
            digest.update(path.read_bytes())
    return digest.hexdigest()


def device_name(device: str) -> str:
    """The device in words, without touching it (a GPU's name from nvidia-smi)."""
    if not device.startswith("cuda"):
        return describe_device(device)
    index = device.split(":")[1] if ":" in device else "0"
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            name = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader", "-i", index],
                                  capture_output=True, text=True, timeout=20).stdout.strip()
            if name:
                return f"{device}: {name}"
        except (OSError, subprocess.SubprocessError):
            pass
    return device


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def baseline_versions(task: Task) -> dict[str, str]:
    """Python, torch, triton and every anchor's package, as installed (read, not imported)."""
    found = {"python": platform.python_version(), "torch": _version("torch"),
             "triton": _version("triton")}
    for anchor in dict(getattr(task.module, "ANCHORS", {}) or {}).values():
        package = anchor.get("package", anchor["module"].split(".")[0])
        found[package] = _version(package)
    return found


def compile_wanted(device: str, compile: bool | None = None) -> tuple[bool, str]:
    """Whether ``torch.compile`` is measured, and why not when it is not (see the module doc)."""
    if compile is not None:
        return compile, "" if compile else "not asked for"
    if os.environ.get(COMPILE_ENV, "") == "0":
        return False, f"not measured ({COMPILE_ENV}=0)"
    if device.startswith("cuda") or os.environ.get(COMPILE_ENV, "") == "1":
        return True, ""
    return False, f"not measured on cpu (set {COMPILE_ENV}=1; 25-30 s per task on 2 cores)"


def measure_baselines(task: Task | Path | str, settings: EvaluatorSettings,
                      compile: bool | None = None, timeout_s: float = 1800.0,
                      refresh: bool = False, language: str | None = None) -> BaselineTable:
    """The task's baselines on ``settings.device`` under ``settings``' timing: from the cache,
    else measured in the worker process (and cached). ``language``: time the task's starting
    kernel in it too, which carries the baselines over to each evaluation (``with_baselines``).
    ``BaselineError`` if the worker fails."""
    if not isinstance(task, Task):
        task = load_task(task, settings.device.split(":")[0])
    timing = TimingSettings.of(settings)
    wanted, why_not = compile_wanted(settings.device, compile)
    device = device_name(settings.device)
    versions = baseline_versions(task)
    key = hashlib.sha256(json.dumps(
        [MEASURING, task_content_hash(task), device, versions, timing.as_dict(), wanted],
        sort_keys=True).encode()).hexdigest()[:24]
    path = Path(settings.cache_dir) / "baselines" / f"{task.name}-{key}.json"
    language = language or ""
    kept = None if refresh else _kept_table(_kept_doc(path), language)
    if kept is not None:
        return kept
    request = {"task": str(task.path), "device": settings.device, "timing": timing.as_dict(),
               "compile": wanted, "compile_reason": why_not, "language": language,
               "cache_dir": str(settings.cache_dir)}
    with measured_once(path):
        stored = None if refresh else _kept_doc(path)  # measured while this one waited?
        kept = _kept_table(stored, language)
        if kept is not None:
            return kept
        shared = _kept_table(stored, "")
        if stored is not None and shared is not None:  # for another language: this start now
            reply = _run_worker({**request, "start_only": True}, settings.device, timeout_s)
            start = carried_start(shared, reply)
            doc = {**stored, "starts": {**dict(stored.get("starts") or {}), language: start}}
        else:
            reply = _run_worker(request, settings.device, timeout_s)
            start = dict(reply.get("start", {}))
            doc = {"task": task.name, "device": device, "key": key, "timing": timing.as_dict(),
                   "versions": versions, "shapes": reply["shapes"],
                   "skipped": dict(reply["skipped"]),
                   "starts": {language: start} if language else {}}
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(_stored(doc), indent=1))
        temporary.replace(path)
        return _table(doc, language, cached=False)


def carried_start(shared: BaselineTable, reply: Mapping[str, Any]) -> dict[str, Any]:
    """A language's starting kernel timed after the baselines it joins (``reply``: eager and
    that start, timed together), as if timed with them: scaled per shape by eager's time then
    over eager's time now, so that a machine busier or quieter than when the baselines were
    measured moves the start as it moved eager (unscaled where eager failed either time)."""
    carried: dict[str, Any] = {}
    for label, timed in dict(reply.get("start", {})).items():
        then = shared.get(label, EAGER)
        now = BaselineTime.from_json(reply["shapes"].get(label, {}).get(EAGER, {"error": "-"}))
        entry = dict(timed)
        if then.ok and now.ok and entry.get("median_us") is not None:
            ratio = then.median_us / now.median_us
            entry["median_us"] = entry["median_us"] * ratio
            entry["iqr_us"] = (entry.get("iqr_us") or 0.0) * ratio
            entry["detail"] = (f"timed after the baselines, scaled by eager's "
                               f"{then.median_us:.4g} us then over {now.median_us:.4g} us now")
        carried[label] = entry
    return carried


def _stored(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The cache file: the baselines and each language's start; no one language's view."""
    from .baseline_worker import _finite

    return _finite({k: v for k, v in doc.items() if k not in ("language", "start")})


def _table(doc: Mapping[str, Any], language: str, cached: bool) -> BaselineTable:
    starts = dict(doc.get("starts") or {})
    return BaselineTable.from_json({**doc, "language": language,
                                    "start": starts.get(language, {})}, cached=cached)


def _kept_doc(path: Path) -> dict[str, Any] | None:
    """The kept entry as stored, or None (none kept, or damaged: measured again)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _kept_table(doc: Mapping[str, Any] | None, language: str) -> BaselineTable | None:
    """The kept entry seen from ``language`` (its start timed with the baselines, or carried
    in later): None where none is kept, or none has that language's start ("": any)."""
    if doc is None:
        return None
    try:
        if language and language not in dict(doc.get("starts") or {}):
            return None
        return _table(doc, language, cached=True)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None  # a damaged entry is measured again


@contextmanager
def measured_once(path: Path | None) -> Iterator[None]:
    """Held while the cache entry at ``path`` is measured: another process of this machine (or
    of a node sharing the cache folder) that needs the same entry waits here, then reads what
    the first one wrote, instead of measuring it on another GPU at the same time (the cells of
    a sweep, the workers of a pool and every test process share one cache). The lock is the
    file ``.<name>.lock`` beside the entry, released when its holder ends, however it ends.
    Nothing for None (no cache)."""
    if path is None:
        yield
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path.with_name(f".{path.name}.lock"), "a")  # noqa: SIM115 - held below
    except OSError:  # a read-only cache: measured here, as without one
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_worker_process(module: str, request: dict[str, Any], device: str, timeout_s: float
                       ) -> tuple[int, str, dict[str, Any] | None]:
    """Run ``python -m module REQUEST REPLY`` (a process of trusted code: the baselines', a
    generated start's) with ``request`` as JSON, in a scrubbed environment and a folder of its
    own: (exit status, the end of its stderr, its reply or None). ``TimeoutExpired`` past
    ``timeout_s``."""
    extra = {**WORKER_ENVIRONMENT, **({} if device.startswith("cuda") else _CPU_THREADS),
             "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    with tempfile.TemporaryDirectory(prefix="kernelswarm-worker-") as folder:
        asked, answer = Path(folder) / "request.json", Path(folder) / "reply.json"
        asked.write_text(json.dumps(request))
        done = subprocess.run([sys.executable, "-m", module, str(asked), str(answer)],
                              env=scrubbed_environment(extra=extra), cwd=folder,
                              capture_output=True, text=True, timeout=timeout_s)
        reply = json.loads(answer.read_text()) if answer.is_file() else None
        return done.returncode, done.stderr[-4000:], reply


def _run_worker(request: dict[str, Any], device: str, timeout_s: float) -> dict[str, Any]:
    try:
        status, stderr, reply = run_worker_process(WORKER_MODULE, request, device, timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise BaselineError(f"measuring the baselines of {request['task']} took more than "
                            f"{timeout_s:g} s") from exc
    if status != 0 or reply is None:
        raise BaselineError(f"the baseline worker failed (exit {status}) on "
                            f"{request['task']}:\n{stderr}")
    return reply


def with_baselines(result: ShapeResult, table: BaselineTable | None) -> ShapeResult:
    """``result`` with the baselines of its shape: eager and compile times, the best baseline's
    name and time, and the speedups over each with their 95% confidence half-widths. Where the
    table timed the starting kernel and ``result`` has its interleaved time, the baselines' times
    are carried over by the starting kernel's ratio (module docstring). A shape that was not
    timed, or a missing table, leaves the fields NaN."""
    if table is None or not result.time_us > 0:
        return result
    mine = (result.time_us, result.time_spread_us, result.samples)
    then = table.start.get(result.shape)
    scale, extra = 1.0, 0.0
    if then is not None and then.ok and result.start_time_us > 0:
        scale = result.start_time_us / then.median_us
        # the ratio's own error: both starting-kernel medians
        extra = math.hypot(median_rel_se(then.median_us, then.iqr_us, then.samples),
                           median_rel_se(result.start_time_us, result.start_spread_us,
                                         result.samples))

    def figures(timed: BaselineTime) -> tuple[float, float, float, float]:
        us, spread = timed.median_us * scale, timed.iqr_us * scale
        ci = speedup_ci((us, spread, timed.samples), mine)
        if math.isfinite(ci) and extra > 0:
            ci = math.hypot(ci, Z95 * (us / result.time_us) * extra)
        elif math.isnan(extra):
            ci = math.nan
        return us, spread, us / result.time_us, ci

    values: dict[str, Any] = {}
    for prefix, name in (("eager", EAGER), ("compile", COMPILE)):
        timed = table.get(result.shape, name)
        if timed.ok:
            us, spread, speedup, ci = figures(timed)
            values.update({f"{prefix}_time_us": us, f"{prefix}_spread_us": spread,
                           f"speedup_vs_{prefix}": speedup, f"speedup_vs_{prefix}_ci": ci})
    best = table.best(result.shape)
    if best is not None:
        us, spread, speedup, ci = figures(best[1])
        values.update(best_baseline=best[0], best_baseline_us=us, best_baseline_spread_us=spread,
                      speedup_vs_best=speedup, speedup_vs_best_ci=ci)
    return replace(result, **values)
