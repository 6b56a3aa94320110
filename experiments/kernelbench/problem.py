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
generated ``task.py``, which the task loader imports. Sizes are the problem's integer constants,
literal or computed from earlier ones (``N = 2048 * 2``, ``height = width = 128``,
``dim = N // 4``); a constant computed from others follows them when they change. The cuda
shapes keep the file's values. The cpu shapes take ``sizes`` and are then shrunk until they
are small enough to evaluate in seconds (``SHRINK``). A held-out shape halves, to an odd number,
the sizes only ``get_inputs()`` depends on, and keeps those the model is built from (``fixed``).
"""

from __future__ import annotations

import ast
import operator
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kernelswarm.search import Shape, Task, TaskError, load_task

from .template import STUB_CPP, TASK_PY

REQUIRED = ("Model", "get_inputs", "get_init_inputs")
KERNELBENCH_TOLERANCE = 1e-2  # KernelBench's atol and rtol


@dataclass(frozen=True)
class Shrink:
    """How the cpu shapes are shrunk: while a shape moves more than ``max_bytes`` or does more
    than ``max_flops`` (as traced), the largest size of at least ``2 * floor`` that was not set
    by hand is halved, never below ``floor`` (small constants are settings: a kernel size, a
    stride, a dimension index)."""

    max_bytes: int = 4 << 20
    max_flops: int = 200_000_000
    floor: int = 16


SHRINK = Shrink()

_OPERATORS: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
    ast.LShift: operator.lshift}


@dataclass(frozen=True)
class Problem:
    """What a problem file declares, read without running it."""

    path: Path
    name: str
    constants: Mapping[str, int]  # every integer constant's value in the file, in file order
    expressions: Mapping[str, ast.expr]  # how each is computed
    depends: Mapping[str, frozenset[str]]  # the earlier constants each one is computed from
    fixed: frozenset[str]  # constants the model is built from
    varied: tuple[str, ...]  # constants only get_inputs() uses: held-out shapes change them

    def roots(self, names: set[str] | frozenset[str] | tuple[str, ...]) -> set[str]:
        """The literal constants ``names`` are computed from (a literal is its own root)."""
        found, todo = set(), list(names)
        while todo:
            name = todo.pop()
            if self.depends[name]:
                todo.extend(self.depends[name])
            else:
                found.add(name)
        return found

    def values(self, overrides: Mapping[str, int] | None = None) -> dict[str, int]:
        """Every constant with ``overrides`` in place, the computed ones recomputed."""
        overrides = overrides or {}
        values: dict[str, int] = {}
        for name, expression in self.expressions.items():
            value = overrides.get(name)
            values[name] = _evaluate(expression, values) if value is None else value
        return values


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _evaluate(node: ast.AST, known: Mapping[str, int]) -> int | None:
    """The integer ``node`` computes from literals and ``known`` constants; None otherwise."""
    if isinstance(node, ast.Constant):
        return node.value if type(node.value) is int else None
    if isinstance(node, ast.Name):
        return known.get(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _evaluate(node.operand, known)
        return None if value is None else (-value if isinstance(node.op, ast.USub) else value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _evaluate(node.left, known), _evaluate(node.right, known)
        if left is None or right is None or (isinstance(node.op, (ast.Pow, ast.LShift))
                                             and not 0 <= right <= 64):
            return None
        try:
            return _OPERATORS[type(node.op)](left, right)
        except ZeroDivisionError:
            return None
    return None


def _assignments(tree: ast.Module) -> list[tuple[str, ast.expr]]:
    """(name, value) of every module-level assignment to a name, chained and unpacked too."""
    pairs: list[tuple[str, ast.expr]] = []
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            pairs.append((node.target.id, node.value))
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:  # height = width = 128: one value, several names
            if isinstance(target, ast.Name):
                pairs.append((target.id, node.value))
            elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple) \
                    and len(target.elts) == len(node.value.elts):
                pairs.extend((t.id, v) for t, v in zip(target.elts, node.value.elts, strict=True)
                             if isinstance(t, ast.Name))
    return pairs


def _size_constants(tree: ast.Module) -> tuple[dict[str, int], dict[str, ast.expr]]:
    values: dict[str, int] = {}
    expressions: dict[str, ast.expr] = {}
    for name, expression in _assignments(tree):
        value = _evaluate(expression, values)
        if value is None or name == "dtype":  # reassigned to something else: not a size
            values.pop(name, None)
            expressions.pop(name, None)
            continue
        values[name], expressions[name] = value, expression
    return values, expressions


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
    constants, expressions = _size_constants(tree)
    depends = {name: frozenset(_names(e) & set(constants)) for name, e in expressions.items()}
    built_from = _names(defined["Model"]) | _names(defined["get_init_inputs"])
    fixed = frozenset(c for c in constants if c in built_from)
    varied = tuple(c for c in constants if c in _names(defined["get_inputs"]) and c not in fixed)
    return Problem(path, path.stem, constants, expressions, depends, fixed, varied)


def _odd_half(value: int) -> int:
    """A smaller odd size: tails of tiles and vectors, never a size seen while tuning."""
    half = max(1, value // 2)
    return half if half % 2 else half + 1


def check_sizes(problem: Problem, sizes: Mapping[str, int]) -> None:
    """``TaskError`` naming the first ``--size`` that is not a positive size of the problem."""
    for name, value in sizes.items():
        if name not in problem.constants:
            raise TaskError(f"--size {name}: {problem.path.name} has no integer constant "
                            f"{name!r}; it has: {', '.join(problem.constants) or 'none'}")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise TaskError(f"--size {name}={value!r}: must be a positive integer")


def problem_shapes(problem: Problem, sizes: Mapping[str, int] | None = None
                   ) -> tuple[dict[str, list[dict]], dict[str, list[dict]]]:
    """(tuning, held-out) shapes per device; ``sizes`` sets constants of the cpu shapes (those
    computed from them follow)."""
    sizes = dict(sizes or {})
    check_sizes(problem, sizes)
    halved = (problem.roots(problem.varied) - problem.roots(problem.fixed)) \
        | (set(sizes) & set(problem.varied))
    tuning, heldout = {}, {}
    for device, overrides in (("cpu", sizes), ("cuda", {})):
        values = problem.values(overrides)
        tuning[device] = [{**values, "dtype": "float32"}]
        odd = problem.values({**overrides, **{c: _odd_half(values[c]) for c in halved}})
        heldout[device] = [{**odd, "dtype": "float32"}] if odd != values else []
    return tuning, heldout


def shrink_sizes(problem: Problem, sizes: Mapping[str, int],
                 trace: Callable[[dict], Mapping[str, int]], shrink: Shrink = SHRINK
                 ) -> dict[str, int]:
    """``sizes`` plus the literal sizes halved by ``shrink``'s rule (``trace(shape)`` gives a
    shape's bytes and flops, or raises ``TaskError`` for sizes the model cannot take: such a
    halving is undone and that size kept, e.g. a dilated kernel wider than the input, or two
    sizes that must stay equal)."""
    sizes = dict(sizes)
    shrinkable = problem.roots(problem.fixed | set(problem.varied)) - set(sizes)
    traced = trace({**problem.values(sizes), "dtype": "float32"})
    while traced["bytes"] > shrink.max_bytes or traced["flops"] > shrink.max_flops:
        values = problem.values(sizes)
        candidates = [n for n in shrinkable if values[n] >= 2 * shrink.floor]
        if not candidates:
            break
        largest = max(candidates, key=lambda n: (values[n], n))
        tried = {**sizes, largest: max(shrink.floor, values[largest] // 2)}
        try:
            traced = trace({**problem.values(tried), "dtype": "float32"})
        except TaskError:
            shrinkable.discard(largest)
            continue
        sizes = tried
    return sizes


def _render_task(problem: Problem, shapes: tuple[dict, dict],
                 traced: Mapping[str, object], tolerance: tuple[float, float]) -> str:
    tuning, heldout = shapes
    atol, rtol = tolerance
    tolerances = {dtype: {"atol": atol, "rtol": rtol}
                  for dtype in ("float32", "float16", "bfloat16")}
    return TASK_PY.substitute(
        name=repr(problem.name), origin=problem.path.name, tuning=_literal(tuning),
        heldout=_literal(heldout), fixed=repr(sorted(problem.fixed)), traced=_literal(traced),
        tolerances=_literal(tolerances))


def _literal(mapping: Mapping[str, object]) -> str:
    """A Python literal of ``mapping`` with one key per line (its values are plain Python
    data: ints, floats, bools, strings, lists and dicts of them)."""
    if not mapping:
        return "{}"
    return "{\n" + "".join(f"    {k!r}: {v!r},\n" for k, v in mapping.items()) + "}"


def _tracer(task: Task, problem: Problem) -> Callable[[dict], dict]:
    """The written task.py's ``trace``, its failures a ``TaskError`` naming problem and shape."""
    def trace(shape: dict) -> dict:
        try:
            return task.module.trace(shape)
        except Exception as exc:
            raise TaskError(f"{problem.path.name}: the model cannot be run on shape "
                            f"{Shape.of(shape).label}: {type(exc).__name__}: {exc}") from exc
    return trace


@dataclass(frozen=True)
class _Shapes:
    """The shapes of one device, as a tester reads them from a task."""

    tuning_shapes: tuple[Shape, ...]
    heldout_shapes: tuple[Shape, ...]


def _trace_all(trace: Callable[[dict], dict], tuning: dict[str, list[dict]],
               heldout: dict[str, list[dict]]) -> tuple[dict[str, object], list[str]]:
    """``trace()`` of the written task.py on every shape of every device and on the built-in
    tester's check shapes, by shape label (a shape traced in a sandbox would import what the
    sandbox forbids to change once a kernel is loaded: the flop counter, torch._dynamo); and
    the labels of the held-out shapes the model cannot run, which are dropped from ``heldout``
    (a problem whose sizes must stay as they are, e.g. equal to another)."""
    from kernelswarm.agents import RuleTester

    traced: dict[str, object] = {}
    for shape in (s for group in tuning.values() for s in group):
        label = Shape.of(shape).label
        if label not in traced:
            traced[label] = trace(shape)
    dropped = []
    for group in heldout.values():
        for shape in list(group):
            label = Shape.of(shape).label
            try:
                traced[label] = traced[label] if label in traced else trace(shape)
            except TaskError:
                group.remove(shape)
                dropped.append(label)
    for device in tuning:
        view = _Shapes(tuple(map(Shape.of, tuning[device])),
                       tuple(map(Shape.of, heldout[device])))
        for check in RuleTester().checks(view, "cpp"):  # type: ignore[arg-type]
            label = Shape.of(check.shape).label
            if label not in traced:
                try:
                    traced[label] = trace(dict(check.shape))
                except TaskError:  # a size the model cannot take: the run drops the check
                    continue
    return traced, dropped


def _tolerance(atol: float | None, rtol: float | None) -> tuple[float, float]:
    chosen = []
    for name, value in (("atol", atol), ("rtol", rtol)):
        value = KERNELBENCH_TOLERANCE if value is None else value
        if not 0 <= value <= KERNELBENCH_TOLERANCE:
            raise TaskError(f"--{name} {value}: must be between 0 and KernelBench's "
                            f"{KERNELBENCH_TOLERANCE} (a looser one would pass kernels "
                            f"KernelBench fails)")
        chosen.append(float(value))
    return chosen[0], chosen[1]


@dataclass(frozen=True)
class Imported:
    """An imported task, its cpu sizes that differ from the file's (name -> (file value, cpu
    value)): set with ``sizes`` or shrunk, and the held-out shapes left out."""

    task: Task
    cpu_sizes: Mapping[str, tuple[int, int]]
    dropped_heldout: tuple[str, ...] = ()  # held-out shapes the model cannot run


def import_problem(problem_file: str | Path, dest: str | Path, *, cpp_source: str | None = None,
                   sizes: Mapping[str, int] | None = None, shrink: Shrink | None = SHRINK,
                   atol: float | None = None, rtol: float | None = None) -> Imported:
    """Write the task folder ``dest`` for the problem and return it loaded (for the cpu).

    ``cpp_source`` is the starting kernel (else a stub with the entry point's signature is
    written). ``sizes`` set cpu sizes by hand; ``shrink`` (None: off) shrinks the others.
    ``atol``/``rtol`` default to KernelBench's and may only be stricter. The folder is built
    beside ``dest`` and moved there only once it loads, so a problem that cannot be imported
    leaves nothing behind. ``dest`` must not exist or be empty.
    """
    problem = read_problem(problem_file)
    tolerance = _tolerance(atol, rtol)
    sizes = dict(sizes or {})
    check_sizes(problem, sizes)
    dest = Path(dest).expanduser().resolve()
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise TaskError(f"{dest}: already exists and is not an empty folder")
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    moved = False
    try:
        shutil.copyfile(problem.path, staging / "problem.py")
        (staging / "task.py").write_text(_render_task(problem, problem_shapes(problem, sizes),
                                                      {}, tolerance))
        (staging / "kernel.cpp").write_text(cpp_source or "")
        trace = _tracer(load_task(staging, "cpu"), problem)
        if shrink is not None:
            sizes = shrink_sizes(problem, sizes, trace, shrink)
        shapes = problem_shapes(problem, sizes)
        traced, dropped = _trace_all(trace, *shapes)
        (staging / "task.py").write_text(_render_task(problem, shapes, traced, tolerance))
        if dest.exists():
            dest.rmdir()
        staging.rename(dest)
        moved = True
        task = load_task(dest, "cpu")
        if cpp_source is None:
            stub = STUB_CPP.substitute(name=problem.name, signature=task.module.c_signature())
            (dest / "kernel.cpp").write_text(stub)
            task = load_task(dest, "cpu")
    except TaskError as exc:
        shutil.rmtree(dest if moved else staging, ignore_errors=True)
        # name the files where the user will look for them, not the staging folder
        raise TaskError(str(exc).replace(str(staging), str(dest))) from exc
    except BaseException:
        shutil.rmtree(dest if moved else staging, ignore_errors=True)
        raise
    cpu = problem.values(sizes)
    return Imported(task, {n: (problem.constants[n], v) for n, v in cpu.items()
                           if v != problem.constants[n]}, tuple(dict.fromkeys(dropped)))
