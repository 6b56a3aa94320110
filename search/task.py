"""Tasks: what is optimised, the reference it is held to, and the kernels a search starts from.

A task is a folder holding a ``task.py`` and the starting kernels' sources. ``task.py`` is trusted
user code (it may import torch); it is loaded here only for its declarations, while its reference
and launchers run in the evaluator's sandbox.

Module-level names ``task.py`` must define:

``NAME``             str
``TUNING_SHAPES``    list of dicts (str -> int or str), each with a "dtype" that TOLERANCES
                     has; the shapes a search is scored on; or a dict device kind ("cpu",
                     "cuda") -> such a list
``HELDOUT_SHAPES``   list of dicts (or per device, likewise); checked before a kernel is
                     reported as a result
``TOLERANCES``       dict dtype name -> {"atol": float, "rtol": float}
``KERNELS``          dict language -> {"source": file name, "entry": symbol, "knobs": {name: [values]},
                     "argtypes": [...] (cpp), ...}
``make_inputs(shape, seed, device)``  -> tuple of tensors
``make_outputs(shape, device)``       -> tuple of tensors the kernel writes
``reference(*inputs)``                -> tuple of tensors, same order as ``make_outputs``
``launch_<language>(fn, inputs, outputs, shape)``  calls the compiled entry point
``roofline(shape)``   -> (bytes moved, flops) of an ideal kernel

Optional: ``DESCRIPTION`` (str); ``WRONG_RESULT_HINT`` (str, appended to a wrong result's message).
"""

from __future__ import annotations

import importlib.util
import math
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from .candidate import Candidate, Origin
from .language_spec import LANGUAGES, SPECS


class TaskError(ValueError):
    """A task folder that cannot be used; the message names the part that is wrong."""


@dataclass(frozen=True)
class Shape(Mapping[str, Any]):
    """One problem size (and dtype) of a task, hashable and ordered by key. A ``Mapping``: its
    ``items()``, ``keys()`` and ``get`` are a dict's (``pairs`` holds the sorted pairs)."""

    pairs: tuple[tuple[str, Any], ...]

    @classmethod
    def of(cls, mapping: Mapping[str, Any]) -> Shape:
        return cls(tuple(sorted(mapping.items())))

    def __getitem__(self, key: str) -> Any:
        for k, v in self.pairs:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self.pairs)

    def __len__(self) -> int:
        return len(self.pairs)

    @property
    def label(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.pairs)

    def __str__(self) -> str:
        return self.label


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float


@dataclass(frozen=True)
class StartingKernel:
    """The kernel a search starts from in one language, with its knob space."""

    language: str
    source: str
    entry: str
    knobs: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    spec: Mapping[str, Any] = field(default_factory=dict)  # language-specific extras (argtypes, ...)


@dataclass(frozen=True)
class Task:
    """A loaded task: declarations only; ``module`` holds the callables for the evaluator."""

    name: str
    path: Path
    description: str
    tuning_shapes: tuple[Shape, ...]
    heldout_shapes: tuple[Shape, ...]
    tolerances: Mapping[str, Tolerance]
    kernels: Mapping[str, StartingKernel]
    module: ModuleType = field(repr=False, compare=False, hash=False)

    def kernel(self, language: str) -> StartingKernel:
        if language not in self.kernels:
            raise TaskError(
                f"task {self.name!r} has no starting kernel for language {language!r}; "
                f"it has: {', '.join(sorted(self.kernels)) or 'none'}"
            )
        return self.kernels[language]

    def starting_candidate(self, language: str) -> Candidate:
        """The task's starting kernel in ``language`` as a candidate (knobs at their first values)."""
        kernel = self.kernel(language)
        return Candidate.create(language=language, source=kernel.source, entry=kernel.entry,
                                knob_space=kernel.knobs, origin=Origin(role="seed", move="start"),
                                spec=kernel.spec)

    def roofline(self, shape: Shape) -> tuple[float, float]:
        moved, flops = self.module.roofline(dict(shape))
        return float(moved), float(flops)

    def tolerance(self, dtype: str) -> Tolerance:
        if dtype not in self.tolerances:
            raise TaskError(f"task {self.name!r}: TOLERANCES has no entry for dtype {dtype!r}")
        return self.tolerances[dtype]


_REQUIRED = ("NAME", "TUNING_SHAPES", "TOLERANCES", "KERNELS", "make_inputs", "make_outputs",
             "reference", "roofline")


def _import_task_module(path: Path) -> ModuleType:
    name = f"kernelswarm_task_{path.parent.name}_{abs(hash(str(path))):x}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TaskError(f"{path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise TaskError(f"{path}: importing it failed: {type(exc).__name__}: {exc}") from exc
    return module


def _shapes(module: ModuleType, attr: str, where: Path, device: str) -> tuple[Shape, ...]:
    raw = getattr(module, attr, [])
    if isinstance(raw, Mapping):  # shapes per device kind: {"cpu": [...], "cuda": [...]}
        if device not in raw:
            raise TaskError(f"{where}: {attr} has no shapes for device {device!r}; it has: "
                            f"{', '.join(sorted(raw)) or 'none'}")
        raw = raw[device]
    if not isinstance(raw, (list, tuple)) or not all(isinstance(s, Mapping) for s in raw):
        raise TaskError(f"{where}: {attr} must be a list of dicts, got {type(raw).__name__}")
    for i, s in enumerate(raw):
        # The dtype picks the tolerance and the tensors' type: a shape without one is ambiguous.
        if not isinstance(s.get("dtype"), str):
            raise TaskError(f"{where}: {attr}[{i}] = {dict(s)} has no 'dtype' (a name such as "
                            f"'float32', a key of TOLERANCES)")
    return tuple(Shape.of(s) for s in raw)


def _kernels(module: ModuleType, folder: Path, where: Path) -> dict[str, StartingKernel]:
    raw = module.KERNELS
    if not isinstance(raw, Mapping) or not raw:
        raise TaskError(f"{where}: KERNELS must be a non-empty dict of language -> kernel spec")
    kernels = {}
    for language, spec in raw.items():
        if language not in SPECS:
            raise TaskError(f"{where}: KERNELS[{language!r}]: unknown language; allowed: "
                            f"{', '.join(LANGUAGES)}")
        described = SPECS[language]
        for key in ("source", "entry"):
            if key not in spec:
                raise TaskError(f"{where}: KERNELS[{language!r}] lacks {key!r}")
        source_path = folder / spec["source"]
        if not source_path.is_file():
            raise TaskError(f"{where}: KERNELS[{language!r}]['source'] names {spec['source']!r}, "
                            f"which is not a file in {folder}")
        try:
            described.check_kernel_entry(spec)
        except ValueError as exc:
            raise TaskError(f"{where}: {exc}") from None
        launcher = described.launcher
        if not callable(getattr(module, launcher, None)):
            raise TaskError(f"{where}: KERNELS has {language!r} but no function {launcher}()")
        knobs = {str(k): tuple(v) for k, v in spec.get("knobs", {}).items()}
        for k, values in knobs.items():
            if not values:
                raise TaskError(f"{where}: KERNELS[{language!r}]['knobs'][{k!r}] has no values")
        extras = {k: v for k, v in spec.items() if k not in ("source", "entry", "knobs")}
        kernels[language] = StartingKernel(language, source_path.read_text(), spec["entry"],
                                           knobs, extras)
    return kernels


def _check_dtypes(tuning: tuple[Shape, ...], heldout: tuple[Shape, ...],
                  tolerances: Mapping[str, Tolerance], where: Path) -> None:
    """Every dtype a shape names has a tolerance (found here, not mid-search on that shape)."""
    for attr, shapes in (("TUNING_SHAPES", tuning), ("HELDOUT_SHAPES", heldout)):
        for shape in shapes:
            if shape["dtype"] not in tolerances:
                raise TaskError(f"{where}: TOLERANCES has no entry for dtype {shape['dtype']!r}, "
                                f"which {attr} uses ({shape.label}); it has: "
                                f"{', '.join(sorted(tolerances)) or 'none'}")


def _check_roofline(module: ModuleType, shapes: tuple[Shape, ...], where: Path) -> None:
    """``roofline`` gives two finite, non-negative numbers on every tuning shape.

    Checked at load because the evaluator calls it only after a kernel has been timed.
    """
    for shape in shapes:
        try:
            result = module.roofline(dict(shape))
        except Exception as exc:
            raise TaskError(f"{where}: roofline({shape.label}) raised "
                            f"{type(exc).__name__}: {exc}") from exc
        try:
            moved, flops = (float(v) for v in result)
        except (TypeError, ValueError):
            raise TaskError(f"{where}: roofline({shape.label}) must return (bytes, flops), two "
                            f"numbers; got {result!r}") from None
        if not all(math.isfinite(v) and v >= 0 for v in (moved, flops)) or moved + flops == 0:
            raise TaskError(f"{where}: roofline({shape.label}) = ({moved}, {flops}): bytes and "
                            f"flops must be finite, non-negative and not both zero")


def load_task(path: str | Path, device: str = "cpu") -> Task:
    """Load the task folder at ``path`` (or a ``task.py`` directly) with its shapes for
    ``device`` (``cpu`` or ``cuda``; used where the task declares shapes per device)."""
    path = Path(path).expanduser().resolve()
    file = path / "task.py" if path.is_dir() else path
    if not file.is_file():
        raise TaskError(f"{path}: no task.py there")
    module = _import_task_module(file)
    missing = [n for n in _REQUIRED if not hasattr(module, n)]
    if missing:
        raise TaskError(f"{file}: missing {', '.join(missing)} (see the task format in docs/tasks.md)")
    tuning = _shapes(module, "TUNING_SHAPES", file, device)
    if not tuning:
        raise TaskError(f"{file}: TUNING_SHAPES is empty")
    tolerances = {}
    for dtype, tol in module.TOLERANCES.items():
        try:
            tolerances[dtype] = Tolerance(float(tol["atol"]), float(tol["rtol"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise TaskError(f"{file}: TOLERANCES[{dtype!r}] must be {{'atol': x, 'rtol': y}}") from exc
    heldout = _shapes(module, "HELDOUT_SHAPES", file, device)
    _check_dtypes(tuning, heldout, tolerances, file)
    _check_roofline(module, tuning, file)
    return Task(
        name=str(module.NAME),
        path=file.parent,
        description=str(getattr(module, "DESCRIPTION", "")).strip(),
        tuning_shapes=tuning,
        heldout_shapes=heldout,
        tolerances=tolerances,
        kernels=_kernels(module, file.parent, file),
        module=module,
    )
