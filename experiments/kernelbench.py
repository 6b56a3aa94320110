"""KernelBench problems as kernelswarm tasks.

A KernelBench problem is one Python file defining ``class Model(nn.Module)``, ``get_inputs()``
and ``get_init_inputs()``, with its sizes as module-level integer constants. ``import_problem``
(``kernelswarm tasks import-kernelbench FILE DIR``) turns one into an ordinary task folder:

    DIR/problem.py   the problem file, copied unchanged
    DIR/task.py      the task: reference = the model's forward, inputs from get_inputs()
    DIR/kernel.cpp   the starting cpp kernel (given with --cpp, or a stub to fill in)

A folder rather than a ``kernelbench:`` task name resolved at run time: the folder is checked
once and can be edited (shapes, tolerances), versioned and shared, every process of a run (the
driver, the sandboxes) loads the same files, and the starting kernel has a place to live.

This module reads the problem with ``ast`` only; everything that needs torch runs in the
generated ``task.py``, which the task loader imports. Shapes are the problem's integer
constants: the cpu shapes may be shrunk (``sizes``), and a held-out shape halves, to an odd
number, each constant that only ``get_inputs()`` uses (the constants the model is built from
keep their values, so every shape runs the same model).
"""

from __future__ import annotations

import ast
import json
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kernelswarm.search import Shape, Task, TaskError, load_task

from .kernelbench_template import STUB_CPP, TASK_PY

REQUIRED = ("Model", "get_inputs", "get_init_inputs")


@dataclass(frozen=True)
class Problem:
    """What a problem file declares, read without running it."""

    path: Path
    name: str
    constants: Mapping[str, int]  # module-level integer constants, in file order
    fixed: frozenset[str]  # constants the model is built from
    varied: tuple[str, ...]  # constants only get_inputs() uses: held-out shapes change them


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _integer_constants(tree: ast.Module) -> dict[str, int]:
    constants: dict[str, int] = {}
    for node in tree.body:
        target, value = None, None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant) \
                and type(value.value) is int and target.id != "dtype":
            constants[target.id] = value.value
    return constants


def read_problem(path: str | Path) -> Problem:
    """Read a KernelBench problem file; ``TaskError`` says what it lacks."""
    path = Path(path).expanduser().resolve()
    try:
        tree = ast.parse(path.read_text(), str(path))
    except FileNotFoundError:
        raise TaskError(f"{path}: no such problem file") from None
    except SyntaxError as exc:
        raise TaskError(f"{path}: not valid Python: {exc}") from None
    defined = {n.name: n for n in tree.body
               if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    missing = [name for name in REQUIRED if name not in defined]
    if missing:
        raise TaskError(f"{path}: not a KernelBench problem: it does not define "
                        f"{', '.join(missing)} (a problem defines class Model(nn.Module), "
                        f"get_inputs() and get_init_inputs())")
    constants = _integer_constants(tree)
    fixed = frozenset(c for c in constants
                      if c in _names(defined["Model"]) | _names(defined["get_init_inputs"]))
    varied = tuple(c for c in constants if c in _names(defined["get_inputs"]) and c not in fixed)
    return Problem(path, path.stem, constants, fixed, varied)


def _odd_half(value: int) -> int:
    """A smaller odd size: tails of tiles and vectors, never a size seen while tuning."""
    half = max(1, value // 2)
    return half if half % 2 else half + 1


def problem_shapes(problem: Problem, sizes: Mapping[str, int] | None = None
                   ) -> tuple[dict[str, list[dict]], dict[str, list[dict]]]:
    """(tuning, held-out) shapes per device; ``sizes`` overrides constants of the cpu shapes."""
    sizes = dict(sizes or {})
    for name, value in sizes.items():
        if name not in problem.constants:
            raise TaskError(f"--size {name}: {problem.path.name} has no integer constant "
                            f"{name!r}; it has: {', '.join(problem.constants) or 'none'}")
        if name in problem.fixed:
            raise TaskError(f"--size {name}: the model is built from {name}, so it is the same "
                            f"in every shape; change it in the copied problem.py instead")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise TaskError(f"--size {name}={value!r}: must be a positive integer")
    tuning, heldout = {}, {}
    for device, overrides in (("cpu", sizes), ("cuda", {})):
        shape = {**problem.constants, **overrides, "dtype": "float32"}
        tuning[device] = [shape]
        odd = {**shape, **{c: _odd_half(shape[c]) for c in problem.varied}}
        heldout[device] = [odd] if odd != shape else []
    return tuning, heldout


def _render_task(problem: Problem, sizes: Mapping[str, int] | None,
                 traced: Mapping[str, object]) -> str:
    tuning, heldout = problem_shapes(problem, sizes)
    return TASK_PY.substitute(
        name=repr(problem.name), origin=problem.path.name, tuning=_literal(tuning),
        heldout=_literal(heldout), fixed=repr(sorted(problem.fixed)), traced=_literal(traced))


def _literal(mapping: Mapping[str, object]) -> str:
    """A Python literal of ``mapping`` with one key per line (JSON of ints, strings and lists
    is Python too)."""
    if not mapping:
        return "{}"
    lines = "".join(f"    {json.dumps(k)}: {json.dumps(v)},\n" for k, v in mapping.items())
    return "{\n" + lines + "}"


def _trace_all(task: Task, problem: Problem, sizes: Mapping[str, int] | None) -> dict[str, object]:
    """``trace()`` of the written task.py on every shape of every device, by shape label."""
    traced: dict[str, object] = {}
    for shapes in problem_shapes(problem, sizes):
        for shape in (s for group in shapes.values() for s in group):
            label = Shape.of(shape).label
            if label not in traced:
                traced[label] = task.module.trace(shape)
    return traced


def import_problem(problem_file: str | Path, dest: str | Path, *, cpp_source: str | None = None,
                   sizes: Mapping[str, int] | None = None) -> Task:
    """Write the task folder ``dest`` for the problem and return it loaded (for the cpu).

    ``cpp_source`` is the starting kernel (else a stub with the entry point's signature is
    written). The folder is built beside ``dest`` and moved there only once it loads, so a
    problem that cannot be imported leaves nothing behind. ``dest`` must not exist or be empty.
    """
    problem = read_problem(problem_file)
    dest = Path(dest).expanduser().resolve()
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise TaskError(f"{dest}: already exists and is not an empty folder")
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        shutil.copyfile(problem.path, staging / "problem.py")
        (staging / "task.py").write_text(_render_task(problem, sizes, {}))
        (staging / "kernel.cpp").write_text(cpp_source or "")
        task = load_task(staging, "cpu")
        traced = _trace_all(task, problem, sizes)
        (staging / "task.py").write_text(_render_task(problem, sizes, traced))
        if cpp_source is None:
            stub = STUB_CPP.substitute(name=problem.name, signature=task.module.c_signature())
            (staging / "kernel.cpp").write_text(stub)
        if dest.exists():
            dest.rmdir()
        staging.rename(dest)
    except TaskError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        # name the files where the user will look for them, not the staging folder
        raise TaskError(str(exc).replace(str(staging), str(dest))) from exc
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return load_task(dest, "cpu")
