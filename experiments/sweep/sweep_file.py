"""A sweep file: a base configuration and the axes that vary it, expanded into cells.

::

    [sweep]
    name = "silu-grid"          # the sweep folder's prefix and the MLflow experiment's name
    base = "my_run.toml"        # optional: a run configuration, relative to this file
    out_dir = "sweeps"          # sweep folders are created under it
    concurrent_cells = 4        # optional: cells searching at once (default: all)
    max_workers = 1             # optional: workers one cell may hold at once (default: any)

    [base]                      # optional: settings on top of `base` (or of the defaults)
    search.candidates_per_lineage = 6

    [grid]                      # every combination of these values is a cell
    tasks = ["silu_and_mul", "fused_add_rmsnorm"]
    "search.lineages" = [2, 4]

    [[cells]]                   # and/or cells listed one by one
    name = "llm"
    agent.kind = "llm"
    agent.llm.model = "gpt-4.1-mini"
    max_workers = 1

An axis is any setting as a dotted key (as ``--set`` takes it) or one of the short names in
``AXES``. Settings every cell must share (the MLflow store, the cluster, the evaluation device
and workers, where folders go) are refused as axes. Every cell's configuration is validated
before anything starts: a bad axis is a ``ConfigError`` naming the cell and the key.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import QUICKSTART, Config, ConfigError, apply_overrides, validate_config

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

# Short names for the axes people sweep most; singular forms read better in [[cells]].
AXES: dict[str, tuple[str, ...]] = {
    "tasks": ("task", "name"), "languages": ("task", "language"),
    "agents": ("agent", "kind"), "models": ("agent", "llm", "model"),
    "lineages": ("search", "lineages"), "seeds": ("run", "seed"),
    "task": ("task", "name"), "language": ("task", "language"), "agent": ("agent", "kind"),
    "model": ("agent", "llm", "model"), "seed": ("run", "seed"),
}
# One MLflow store, one cluster, one pool of workers and one sweep folder for every cell.
SHARED = ("tracking", "cluster", "evaluator.device", "evaluator.workers", "run.out_dir",
          "run.name")
SWEEP_KEYS = {"name", "base", "out_dir", "concurrent_cells", "max_workers"}
CELL_KEYS = {"name", "max_workers"}  # the rest of a [[cells]] entry are settings


@dataclass(frozen=True)
class SweepCell:
    """One configuration of the sweep: its settings over the base, and the config they make."""

    index: int
    name: str  # e.g. "task=silu_and_mul,lineages=2"
    settings: tuple[tuple[str, Any], ...]  # (dotted key, value), in the sweep file's order
    config: Config
    max_workers: int | None = None

    @property
    def folder(self) -> str:
        """The cell's run folder name inside the sweep folder."""
        return f"{self.index:02d}-" + (re.sub(r"[^A-Za-z0-9_.=+-]", "_",
                                               self.name.replace(",", "+"))[:80] or "cell")

    def document(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "folder": self.folder,
                "settings": [[k, v] for k, v in self.settings], "max_workers": self.max_workers,
                "config": self.config.model_dump(mode="json")}


@dataclass(frozen=True)
class SweepSpec:
    """A sweep file read and expanded: where it goes, how it runs, and its cells."""

    name: str
    out_dir: Path
    base: Config
    cells: tuple[SweepCell, ...]
    concurrent_cells: int | None = None

    @property
    def experiment(self) -> str:
        return self.base.tracking.experiment or self.name


def _dotted(path: tuple[str, ...]) -> str:
    return ".".join(json.dumps(p) if "." in p else p for p in path)


def _split(key: str, where: str) -> tuple[str, ...]:
    """The parts of a quoted dotted key (``"agent.prices.'gpt-4.1'.prompt"``), as TOML reads
    them."""
    try:
        nested: Any = tomllib.loads(f"{key} = 0")
    except tomllib.TOMLDecodeError:
        raise ConfigError(f"{where}.{key}: not a dotted key such as search.lineages") from None
    path = []
    while isinstance(nested, dict):
        (part, nested), = nested.items()
        path.append(part)
    return tuple(path)


def _settings(table: dict[str, Any], where: str, prefix: tuple[str, ...] = (),
              axes: bool = True) -> list[tuple[tuple[str, ...], Any]]:
    """The (key path, value) pairs of a table of settings: nested tables are walked (TOML's
    ``search.lineages = ...`` is one), a quoted dotted key is split, a short name expanded.
    With ``axes``, settings every cell must share are refused."""
    out = []
    for key, value in table.items():
        if isinstance(value, dict):
            out += _settings(value, where, (*prefix, key), axes)
            continue
        if prefix:
            path = (*prefix, key)
        elif key in AXES:
            path = AXES[key]
        elif "." in key:
            path = _split(key, where)
        else:
            raise ConfigError(f"{where}.{key}: not a setting; write section.key (e.g. "
                              f"search.lineages) or one of {', '.join(sorted(AXES))}")
        dotted = _dotted(path)
        for shared in SHARED if axes else ():
            if dotted == shared or dotted.startswith(shared + "."):
                raise ConfigError(f"{where}.{dotted}: shared by every cell of a sweep (one MLflow "
                                  f"store, one cluster, one pool of evaluation workers, one sweep "
                                  f"folder); set it in the base configuration")
        out.append((path, value))
    return out


def _set(data: dict[str, Any], path: tuple[str, ...], value: Any, where: str) -> None:
    table = data
    for depth, key in enumerate(path[:-1]):
        table = table.setdefault(key, {})
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: {_dotted(path[:depth + 1])} is a value, not a table")
    table[path[-1]] = copy.deepcopy(value)


def _leaf(path: tuple[str, ...]) -> str:
    short = {v: k for k, v in AXES.items() if not k.endswith("s") or k == "lineages"}
    return short.get(path, path[-1])


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _grid(table: dict[str, Any], where: str) -> list[list[tuple[tuple[str, ...], Any]]]:
    axes = _settings(table, where)
    for path, values in axes:
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}.{_dotted(path)}: an axis is a non-empty list of values, "
                              f"got {values!r}")
    return [list(zip([p for p, _ in axes], combo, strict=True))
            for combo in itertools.product(*(v for _, v in axes))]


def _cap(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{where}: must be a whole number >= 1, got {value!r}")
    return value


def _read_toml(path: Path, what: str) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such {what}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def _base_data(doc: dict[str, Any], folder: Path, overrides: list[str], where: str) -> dict:
    sweep = doc.get("sweep", {})
    base_file = sweep.get("base")
    data = _read_toml((folder / base_file).expanduser() if base_file else QUICKSTART,
                      "base configuration")
    for path, value in _settings(doc.get("base", {}), f"{where}: base", axes=False):
        _set(data, path, value, where)
    return apply_overrides(data, overrides)


# The ready sweep files (sweep_cpu.toml, sweep_gpu.toml) lie beside the quickstart, in the
# package: a user of an installed kernelswarm names them, having no clone to give a path in.
READY_SWEEPS = QUICKSTART.parent


def ready_sweeps() -> list[str]:
    return sorted(p.stem for p in READY_SWEEPS.glob("sweep*.toml"))


def sweep_file_path(given: str | Path) -> Path:
    """A sweep file by its path, else a ready one by name (``sweep_cpu`` or
    ``sweep_cpu.toml``); ``ConfigError`` naming the ready ones when neither is a file."""
    path = Path(given).expanduser()
    if path.is_file():
        return path
    if path.name == str(given):  # a bare name: a ready sweep's
        for name in (path.name, f"{path.name}.toml"):
            if name.startswith("sweep") and (READY_SWEEPS / name).is_file():
                return READY_SWEEPS / name
    raise ConfigError(f"{given}: no such sweep file (the ready ones, by name: "
                      f"{', '.join(ready_sweeps())})")


def load_sweep(path: str | Path, overrides: list[str] | None = None) -> SweepSpec:
    """Read and expand a sweep file (a path, or a ready one's name); ``overrides``
    (``KEY=VALUE``) apply to the base, so to every cell. Every cell's configuration is
    validated before this returns."""
    path = sweep_file_path(path)
    doc = _read_toml(path, "sweep file")
    unknown = sorted(set(doc) - {"sweep", "base", "grid", "cells"})
    if unknown:
        raise ConfigError(f"{path}: unknown table(s) {', '.join(unknown)}; a sweep file has "
                          f"[sweep], [base], [grid] and [[cells]]")
    sweep = doc.get("sweep", {})
    if extra := sorted(set(sweep) - SWEEP_KEYS):
        raise ConfigError(f"{path}: sweep.{extra[0]}: unknown key; allowed here: "
                          f"{', '.join(sorted(SWEEP_KEYS))}")
    name = str(sweep.get("name", path.stem))
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ConfigError(f"{path}: sweep.name: letters, digits, '_', '.', '-' only, got {name!r}")
    base_data = _base_data(doc, path.parent, overrides or [], str(path))
    base = validate_config(copy.deepcopy(base_data), f"{path}: base")
    default_cap = _cap(sweep.get("max_workers"), f"{path}: sweep.max_workers")
    combos = [(c, default_cap, None) for c in _grid(doc["grid"], f"{path}: grid")] \
        if "grid" in doc else []
    for i, entry in enumerate(doc.get("cells", [])):
        where = f"{path}: cells[{i}]"
        settings = {k: v for k, v in entry.items() if k not in CELL_KEYS}
        cap = _cap(entry["max_workers"], f"{where}.max_workers") if "max_workers" in entry \
            else default_cap
        combos.append((_settings(settings, where), cap, entry.get("name")))
    if not combos:
        raise ConfigError(f"{path}: no cells; add a [grid] of axes or [[cells]]")
    cells = []
    for index, (settings, cap, given) in enumerate(combos):
        label = given or ",".join(f"{_leaf(p)}={_shown(v)}" for p, v in settings) or "base"
        data = copy.deepcopy(base_data)
        for key_path, value in settings:
            _set(data, key_path, value, f"{path}: cell {label!r}")
        # The cell's MLflow runs nest under the sweep's, in the sweep's experiment.
        _set(data, ("run", "name"), name, label)
        _set(data, ("tracking", "experiment"), base.tracking.experiment or name, label)
        config = validate_config(data, f"{path}: cell {label!r}")
        try:
            config.task_path()  # a task that does not exist is refused now, not mid-sweep
            if config.search.languages:  # and a language it cannot start from, or run on
                from kernelswarm.search import load_task

                from ..run.prepare import check_languages

                check_languages(config, load_task(config.task_path(), config.evaluator.device))
        except ConfigError as exc:
            raise ConfigError(f"{path}: cell {label!r}: {exc}") from None
        cells.append(SweepCell(index, label, tuple((_dotted(p), v) for p, v in settings),
                               config, cap))
    if len({c.folder for c in cells}) != len(cells):
        raise ConfigError(f"{path}: two cells have the same name; give [[cells]] distinct names")
    concurrent = _cap(sweep.get("concurrent_cells"), f"{path}: sweep.concurrent_cells")
    return SweepSpec(name, Path(sweep.get("out_dir", "sweeps")).expanduser(), base,
                     tuple(cells), concurrent)


def cells_from_document(doc: dict[str, Any], where: str) -> tuple[SweepCell, ...]:
    """The cells a sweep folder's ``sweep.json`` lists, validated again."""
    return tuple(SweepCell(c["index"], c["name"], tuple((k, v) for k, v in c["settings"]),
                           validate_config(c["config"], f"{where}: cell {c['name']!r}"),
                           c.get("max_workers")) for c in doc["cells"])
