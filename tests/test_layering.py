"""The layering of kernelswarm, stated once (``LAYERS``) and checked on the source.

docs/architecture.md quotes ``LAYERS`` (its "Layers" block lists the same folders, top tier
first); ``test_the_architecture_page_states_these_layers`` keeps the two in agreement. Imports
are read from every file, inside functions too, with relative imports resolved to the module
they name (``from ..search import x`` in evaluators/ is an import of ``kernelswarm.search``).
"""

from __future__ import annotations

import ast
import functools
import importlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Tiers, bottom first: a layer may import its own tier's package and the tiers below, never a
# layer beside it or above it. agents/ and evaluators/ share a tier: the roles never build or
# run a kernel and the evaluators never choose one, so neither imports the other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("search",),
    ("agents", "evaluators"),
    ("cluster",),
    ("experiments",),
)
ALL_LAYERS = tuple(layer for tier in LAYERS for layer in tier)
TIER = {layer: i for i, tier in enumerate(LAYERS) for layer in tier}

# Above every layer and not installed: the benchmarks of kernelswarm itself (run from the
# repository root as ``python -m benchmarks.<name>``) and the tests. They may import any layer
# (as ``kernelswarm.<layer>``) and any outside package; no layer imports them.
ABOVE = ("benchmarks", "tests")

# The only places an outside package may be imported. Task files (experiments/tasks/) are
# trusted user code run in the evaluator's sandbox: they may import torch and triton too.
THIRD_PARTY = {
    "ray": ("cluster",),
    "openai": ("agents",),
    "mlflow": ("experiments",),
    "torch": ("evaluators", "tasks"),
    "triton": ("evaluators", "tasks"),
    "cuda": ("evaluators", "tasks"),
    "cupy": ("evaluators", "tasks"),
}


def _module_name(path: Path) -> tuple[str, ...]:
    parts = path.relative_to(ROOT).with_suffix("").parts
    parts = parts if parts[0] in ABOVE else ("kernelswarm", *parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _package(path: Path) -> tuple[str, ...]:
    name = _module_name(path)
    return name if path.name == "__init__.py" else name[:-1]


def _imports(path: Path, text: str | None = None) -> Iterator[tuple[int, str, list[str] | None]]:
    """``(line, absolute module name, names)`` of every import in ``path`` (or in ``text``, read
    as if it were that file), relative ones resolved; ``names`` is what ``from module import``
    names, None for ``import module``."""
    source = path.read_text() if text is None else text
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, None
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = _package(path)
                if node.level - 1 >= len(package):
                    raise AssertionError(f"{path}:{node.lineno}: relative import beyond the "
                                         f"{package[0]} package")
                base = ".".join(package[:len(package) - (node.level - 1)])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            yield node.lineno, module, [alias.name for alias in node.names]


def imported_modules(path: Path, text: str | None = None) -> Iterator[tuple[int, str]]:
    """``(line, absolute module name)`` of every import in ``path`` (or in ``text``, read as
    if it were that file), relative ones resolved; ``from package import name`` also yields
    ``package.name`` where that is a module of the tree."""
    for line, module, names in _imports(path, text):
        yield line, module
        for name in names or ():
            if _source_of(f"{module}.{name}") is not None:
                yield line, f"{module}.{name}"


def _source_of(module: str) -> Path | None:
    """The file of a module of kernelswarm or of ``ABOVE``, or None (another package, or a name
    in a module)."""
    parts = module.split(".")
    if parts[0] in ABOVE:
        folder = ROOT.joinpath(*parts)
    elif parts[0] == "kernelswarm" and len(parts) >= 2:
        folder = ROOT.joinpath(*parts[1:])
    else:
        return None
    for candidate in (folder.with_suffix(".py"), folder / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _files(layer: str) -> list[Path]:
    return sorted((ROOT / layer).rglob("*.py"))


def _place(path: Path) -> str:
    """The layer a file belongs to, or "tasks" for a task folder's files."""
    parts = path.relative_to(ROOT).parts
    return "tasks" if parts[:2] == ("experiments", "tasks") else parts[0]


def layer_problems(path: Path, text: str | None = None) -> list[str]:
    """What ``path`` (or ``text`` as that file) imports against the layering: layers above or
    beside its own, bare layer names, outside packages its layer may not import, and (from a
    layer) benchmarks/ or tests/."""
    place, problems = _place(path), []
    layer = path.relative_to(ROOT).parts[0]
    for line, module in imported_modules(path, text):
        parts = module.split(".")
        where = f"{path.relative_to(ROOT)}:{line}"
        if parts[0] in ALL_LAYERS:
            problems.append(f"{where}: bare import of {module!r}; use kernelswarm.{module}")
        if parts[0] in ABOVE and layer not in ABOVE:
            problems.append(f"{where}: imports {module}; {parts[0]}/ sits above every layer "
                            f"and is not installed")
        if parts[0] in THIRD_PARTY and place not in (*THIRD_PARTY[parts[0]], *ABOVE):
            allowed = " and ".join(f"{p}/" if p != "tasks" else "task files"
                                   for p in THIRD_PARTY[parts[0]])
            problems.append(f"{where}: imports {parts[0]}, which only {allowed} may")
        if parts[0] == "kernelswarm" and len(parts) > 1 and parts[1] in TIER and layer in TIER:
            target = parts[1]
            if target != layer and TIER[target] >= TIER[layer]:
                side = "beside" if TIER[target] == TIER[layer] else "above"
                problems.append(f"{where}: imports {module}, a layer {side} {layer}/")
    return problems


@pytest.mark.parametrize("layer", (*ALL_LAYERS, "benchmarks"))
def test_layer_imports_point_down_only(layer):
    problems = [p for path in _files(layer) for p in layer_problems(path)]
    assert not problems, "\n".join(problems)


# Inside experiments/, the commands are on top: a module of experiments/commands/ parses its
# arguments, calls the library below it and prints. No other module of experiments/ imports a
# command, so what two commands share lives below both (experiments/evaluation/ for eval, tune
# and export-flashinfer).
COMMANDS = "kernelswarm.experiments.commands"


def command_imports(path: Path, text: str | None = None) -> list[str]:
    """Imports of a command module by ``path`` (or ``text`` as that file), a module of
    experiments/ outside experiments/commands/."""
    name = ".".join(_module_name(path))
    if name == COMMANDS or name.startswith(COMMANDS + "."):
        return []
    return [f"{path.relative_to(ROOT)}:{line}: imports {module}, a command; move what it "
            f"needs below experiments/commands/"
            for line, module in imported_modules(path, text)
            if module == COMMANDS or module.startswith(COMMANDS + ".")]


def test_no_library_module_of_experiments_imports_a_command():
    problems = [p for path in _files("experiments") for p in command_imports(path)]
    assert not problems, "\n".join(problems)
    probe = ROOT / "experiments" / "run" / "probe.py"  # the check must be able to fail
    assert command_imports(probe, "from ..commands.eval import run_eval_command\n") == [
        "experiments/run/probe.py:1: imports kernelswarm.experiments.commands.eval, a command; "
        "move what it needs below experiments/commands/"]
    assert command_imports(ROOT / "experiments" / "commands" / "probe.py",
                           "from .eval import add_eval_parser\n") == []


def test_every_module_of_experiments_lives_in_a_subpackage_the_page_names():
    """The root of experiments/ holds no module (a module there is the drawer coming back), and
    docs/architecture.md names each subpackage with what it holds."""
    experiments = ROOT / "experiments"
    loose = sorted(p.name for p in experiments.glob("*.py") if p.name != "__init__.py")
    assert not loose, (f"modules in the root of experiments/: {loose}; move each into the "
                       f"subpackage of its concern (docs/architecture.md, Inside experiments/)")
    subpackages = {p.name for p in experiments.iterdir() if (p / "__init__.py").is_file()}
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("### Inside experiments/", 1)[1].split("\n#", 1)[0]
    named = {name for row in re.findall(r"^\| ([^|]+)\|", section, re.M)
             for name in re.findall(r"`(\w+)/`", row)}
    assert subpackages | {"tasks"} == named, (
        f"docs/architecture.md's table of experiments/ names {sorted(named)}; the subpackages "
        f"are {sorted(subpackages)} (and tasks/)")


def _module_graph(layer: str) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in _files(layer):
        name = ".".join(_module_name(path))
        targets = graph.setdefault(name, set())
        for _, module in imported_modules(path):
            found = _source_of(module)
            # A module's own package __init__ runs before it anyway: not an edge of a cycle.
            if found is not None and found.is_relative_to(ROOT / layer) \
                    and not (found.name == "__init__.py" and name.startswith(module + ".")):
                targets.add(".".join(_module_name(found)))
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm; the graphs are a few hundred modules
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1 or node in graph.get(node, ()):
                cycles.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


@pytest.mark.parametrize("layer", (*ALL_LAYERS, "benchmarks"))
def test_no_import_cycle_inside_a_layer(layer):
    cycles = import_cycles(_module_graph(layer))
    assert not cycles, "modules that import each other (directly or in a ring):\n" + "\n".join(
        " <-> ".join(group) for group in cycles)


def test_the_checker_resolves_relative_imports_and_finds_cycles():
    # The checks above must be able to fail: relative imports of a layer above or beside...
    probe = ROOT / "evaluators" / "languages" / "probe.py"
    assert layer_problems(probe, "from ...search import Candidate\n") == []
    assert layer_problems(probe, "def f():\n    from ...agents import builtin\n") == [
        "evaluators/languages/probe.py:2: imports kernelswarm.agents, a layer beside "
        "evaluators/", "evaluators/languages/probe.py:2: imports kernelswarm.agents.builtin, "
        "a layer beside evaluators/"]
    search_probe = ROOT / "search" / "probe.py"
    assert any("a layer above search/" in p
               for p in layer_problems(search_probe, "from ..cluster import connect\n"))
    assert any("only cluster/ may" in p for p in layer_problems(search_probe, "import ray\n"))
    # benchmarks/ sits above every layer: it imports any, as kernelswarm.<layer>, and none
    # imports it.
    bench_probe = ROOT / "benchmarks" / "probe.py"
    assert layer_problems(bench_probe, "import triton\nimport ray\nfrom kernelswarm.experiments"
                                       ".config import QUICKSTART\nfrom .eval_cost import main\n"
                          ) == []
    assert layer_problems(bench_probe, "from experiments.config import QUICKSTART\n") == [
        "benchmarks/probe.py:1: bare import of 'experiments.config'; use "
        "kernelswarm.experiments.config"]
    assert layer_problems(ROOT / "experiments" / "run" / "probe.py",
                          "def f():\n    from benchmarks.eval_cost import main\n") == [
        "experiments/run/probe.py:2: imports benchmarks.eval_cost; benchmarks/ sits above "
        "every layer and is not installed"]
    # ... and a ring of modules.
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


# The judge's functions take at most ``MAX_PARAMETERS`` parameters besides self or cls: what
# travels together is one object (one candidate's evaluation is a ``Judgement``,
# evaluators/judge/judgement.py), never a dozen loose values handed from call to call.
MAX_PARAMETERS = 5
JUDGE = ROOT / "evaluators" / "judge"


def long_signatures(path: Path, text: str | None = None) -> list[str]:
    """The functions, methods and lambdas of ``path`` (or of ``text`` as that file) that take
    more than ``MAX_PARAMETERS`` parameters besides a first ``self`` or ``cls``; ``*args``
    and ``**kwargs`` count one each."""
    source = path.read_text() if text is None else text
    found = []
    for node in ast.walk(ast.parse(source, str(path))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        args = node.args
        names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
        names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
        if names[:1] in (["self"], ["cls"]):
            names = names[1:]
        if len(names) > MAX_PARAMETERS:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: "
                         f"{getattr(node, 'name', 'lambda')} takes {len(names)} parameters "
                         f"({', '.join(names)}); at most {MAX_PARAMETERS} besides self/cls")
    return found


def test_no_function_of_the_judge_takes_more_than_five_parameters():
    problems = [p for path in sorted(JUDGE.rglob("*.py")) for p in long_signatures(path)]
    assert not problems, "\n".join(problems) + "\nput what travels together in one object"
    # the check must be able to fail: six parameters, counted however they are passed
    probe = JUDGE / "probe.py"
    assert long_signatures(probe, "def f(a, b, c, d, e, g):\n    pass\n") == [
        "evaluators/judge/probe.py:1: f takes 6 parameters (a, b, c, d, e, g); at most 5 "
        "besides self/cls"]
    assert len(long_signatures(probe, "class C:\n    def f(self, a, b, c, *d, e, **g):\n"
                                      "        return lambda h, i, j, k, l, m: 0\n")) == 2
    assert long_signatures(probe, "class C:\n    @classmethod\n"
                                  "    def f(cls, a, b, c, d, e=1):\n        pass\n") == []


# Inside evaluators/, rooms, lowest first: a module imports its own room and the rooms below
# it, never one above (the import would go "back up"). The modules in the root of evaluators/
# are the lowest room (""): what the judge and the runner both speak. The package's __init__ is
# the layer's front door, above every room, and no module inside evaluators/ goes through it.
ROOMS = ("", "sandbox", "languages", "measure", "inductor", "baselines", "starts", "runner",
         "judge")
EVALUATORS = "kernelswarm.evaluators"
MAX_ROOT_MODULES = 10  # __init__.py included


def _room(module: str) -> str | None:
    """The room of a module of evaluators/ ("" for the root), or None for the front door and
    for modules outside evaluators/."""
    if not module.startswith(EVALUATORS + "."):
        return None
    first = module.split(".")[2]
    return first if (ROOT / "evaluators" / first / "__init__.py").is_file() else ""


def room_problems(path: Path, text: str | None = None) -> list[str]:
    """What ``path`` (a file of evaluators/, or ``text`` as that file) imports from a room
    above its own, or through the front door."""
    own = _room(".".join(_module_name(path)))
    if own is None:
        return []
    problems = []
    for line, module, names in _imports(path, text):
        where = f"{path.relative_to(ROOT)}:{line}"
        through_door = [n for n in names or () if _source_of(f"{module}.{n}") is None]
        if module == EVALUATORS and (names is None or through_door):
            problems.append(f"{where}: imports {', '.join(through_door) or module} from the "
                            f"front door of evaluators/; import the module that defines it")
        targets = [module] + [f"{module}.{n}" for n in names or ()
                              if _source_of(f"{module}.{n}") is not None]
        for target in targets:
            room = _room(target)
            if room is not None and room not in ROOMS:
                problems.append(f"{where}: imports {target}, in evaluators/{room}/, which "
                                f"ROOMS does not place")
            elif room is not None and ROOMS.index(room) > ROOMS.index(own):
                problems.append(f"{where}: imports {target}, in evaluators/{room}/, a room above "
                                f"{f'{own}/' if own else 'the root'}")
    return problems


def test_evaluators_rooms_import_their_own_and_those_below():
    problems = [p for path in _files("evaluators") for p in room_problems(path)]
    assert not problems, "\n".join(problems)
    rooms = {p.name for p in (ROOT / "evaluators").iterdir() if (p / "__init__.py").is_file()}
    assert rooms == set(ROOMS) - {""}, (
        f"the subpackages of evaluators/ are {sorted(rooms)}; ROOMS places {ROOMS}")
    root = sorted(p.name for p in (ROOT / "evaluators").glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, (
        f"{len(root)} modules in the root of evaluators/ ({root}); move each into the room of "
        f"its concern")
    # the check must be able to fail: an import back up, lazy or relative, and the front door
    probe = ROOT / "evaluators" / "measure" / "probe.py"
    assert room_problems(probe, "from ..languages import get_language\nfrom .. import "
                                "settings\nfrom ..settings import EvaluatorSettings\n") == []
    assert room_problems(probe, "def f():\n    from ..judge.trial import Trial\n") == [
        "evaluators/measure/probe.py:2: imports kernelswarm.evaluators.judge.trial, in "
        "evaluators/judge/, a room above measure/"]
    assert room_problems(ROOT / "evaluators" / "probe.py",
                         "from .sandbox.crash import describe_exit\n") == [
        "evaluators/probe.py:1: imports kernelswarm.evaluators.sandbox.crash, in "
        "evaluators/sandbox/, a room above the root"]
    assert room_problems(probe, "from .. import SandboxEvaluator\n") == [
        "evaluators/measure/probe.py:1: imports SandboxEvaluator from the front door of "
        "evaluators/; import the module that defines it"]
    assert room_problems(ROOT / "evaluators" / "__init__.py", "from .judge import x\n") == []



def test_the_architecture_page_lists_the_rooms_in_order():
    """docs/architecture.md's table of evaluators/ names the rooms in ``ROOMS``' order, and each
    module it names is in the room it names."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("### Inside evaluators/", 1)[1].split("\n#", 1)[0]
    rows = [row.split("|")[1:3] for row in re.findall(r"^\|(?! room)(?!---).*$", section, re.M)]
    rooms = [(re.findall(r"`(\w+)/`", room) or [""])[0] for room, _ in rows]
    assert rooms == list(ROOMS), (f"docs/architecture.md's table of evaluators/ lists "
                                  f"{rooms}; ROOMS is {list(ROOMS)}")
    missing = [f"evaluators/{room}/{name}.py".replace("//", "/")
               for room, (_, modules) in zip(rooms, rows, strict=True)
               for name in re.findall(r"`(\w+)`", modules)
               if not (ROOT / "evaluators" / room / f"{name}.py").is_file()]
    assert not missing, f"docs/architecture.md names modules that are not there: {missing}"

# Every import names what exists: a module, or a name its module defines. Nothing in this tree
# runs on a GPU here, and many GPU paths import lazily, inside functions: a module moved or a
# name removed would otherwise be found on a GPU machine, at the moment the path runs.
SOURCE_FOLDERS = (*ALL_LAYERS, *ABOVE)


def _bound_names(body: list[ast.stmt]) -> Iterator[str]:
    """The names a module's statements bind at its top level (in if, try and with blocks too)."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield node.name
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield from ((a.asname or a.name).split(".")[0] for a in node.names)
        targets = [*getattr(node, "targets", ()), getattr(node, "target", None)]
        for target in filter(None, targets):
            yield from (n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        for block in ("body", "orelse", "finalbody"):
            yield from _bound_names(getattr(node, block, []))
        for handler in getattr(node, "handlers", []):
            yield from _bound_names(handler.body)


@functools.cache
def defined_names(module: str) -> frozenset[str]:
    """The names module ``module`` of this tree defines; for one that makes names on first use
    (a module ``__getattr__``), its ``__all__`` too."""
    path = _source_of(module)
    names = set(_bound_names(ast.parse(path.read_text(), str(path)).body))
    if "__getattr__" in names:
        names |= set(importlib.import_module(module).__all__)
    return frozenset(names)


def _resolves(module: str, name: str) -> bool:
    return (name.startswith("__") and name.endswith("__")) or name in defined_names(module) \
        or _source_of(f"{module}.{name}") is not None


def unresolved_imports(path: Path, text: str | None = None) -> list[str]:
    """The imports of this tree's modules in ``path`` (or ``text`` as that file) that name no
    module, or a name their module does not define."""
    problems = []
    for line, module, names in _imports(path, text):
        if module.split(".")[0] not in ("kernelswarm", *ABOVE) or module == "kernelswarm":
            continue
        where = f"{path.relative_to(ROOT)}:{line}"
        if _source_of(module) is None:
            problems.append(f"{where}: imports {module}, which is no module")
            continue
        problems += [f"{where}: imports {name} from {module}, which does not define it"
                     for name in names or () if name != "*" and not _resolves(module, name)]
    return problems


def test_every_import_resolves():
    problems = [p for folder in SOURCE_FOLDERS for path in _files(folder)
                for p in unresolved_imports(path)]
    assert not problems, "\n".join(problems)
    # the check must be able to fail: a module that is not there, and a name that is not
    probe = ROOT / "experiments" / "run" / "probe.py"
    gone = "kernelswarm" + ".evaluators.gone"
    assert unresolved_imports(probe, f"def f():\n    from {gone} import x\n"
                                     "    from ...evaluators import Gone\n"
                                     "    import benchmarks.gone\n") == [
        f"experiments/run/probe.py:2: imports {gone}, which is no module",
        "experiments/run/probe.py:3: imports Gone from kernelswarm.evaluators, which does not "
        "define it",
        "experiments/run/probe.py:4: imports benchmarks.gone, which is no module"]
    assert unresolved_imports(probe, "from .folder import RunFolder\nimport os.path\n"
                                     "from kernelswarm.evaluators import SandboxEvaluator\n"
                                     "from kernelswarm.search import __file__\n") == []


# Module paths written as strings (python -m ..., a worker's module, a name in a docstring or
# a page): each dotted kernelswarm name names a module, or a name in one.
_DOTTED = re.compile(r"(?<![\w.])kernelswarm(?:\.\w+)+")
TEXT_SUFFIXES = (".py", ".sh", ".md", ".toml")


def _text_files() -> list[Path]:
    files = [p for folder in SOURCE_FOLDERS for p in sorted((ROOT / folder).rglob("*"))
             if p.suffix in TEXT_SUFFIXES and p.is_file() and "__pycache__" not in p.parts]
    return files + [ROOT / "README.md", ROOT / "pyproject.toml",
                    *sorted((ROOT / "docs").glob("*.md"))]


def dotted_name_resolves(dotted: str) -> bool:
    """Whether a dotted name of kernelswarm is a module of this tree, or one followed by a name
    it defines."""
    parts = dotted.split(".")
    for end in range(len(parts), 1, -1):
        module = ".".join(parts[:end])
        if _source_of(module) is not None:
            return end == len(parts) or _resolves(module, parts[end])
    return False


def unresolved_names(path: Path, text: str | None = None) -> list[str]:
    source = path.read_text() if text is None else text
    return [f"{path.relative_to(ROOT)}:{source.count(chr(10), 0, m.start()) + 1}: "
            f"{m.group()} names no module of kernelswarm nor a name in one"
            for m in _DOTTED.finditer(source) if not dotted_name_resolves(m.group())]


def test_every_module_path_written_as_text_resolves():
    problems = [p for path in _text_files() for p in unresolved_names(path)]
    assert not problems, "\n".join(problems)
    # the check must be able to fail: a module path that is not there, in code or in prose
    probe = ROOT / "evaluators" / "probe.py"
    gone = "kernelswarm" + ".evaluators.baseline_gone"
    assert unresolved_names(probe, f'MODULE = "{gone}"\n"""python -m {gone}.main"""\n') == [
        f"evaluators/probe.py:1: {gone} names no module of kernelswarm nor a name in one",
        f"evaluators/probe.py:2: {gone}.main names no module of kernelswarm nor a name in one"]
    assert unresolved_names(probe, '"kernelswarm.evaluators.runner", kernelswarm.evaluators.'
                                   'SandboxEvaluator.evaluate, kernelswarm.<layer>\n') == []


# A layer enters another through its front door: an import from another layer names that
# layer's package (``kernelswarm.search``, ``kernelswarm.evaluators``, ...), never a module
# inside it, so that what a layer offers the layers above is its package's ``__init__`` and the
# rest can move. (evaluators/ and agents/ make most of their names on first use: a runner
# process imports evaluators/, and the LLM agent's client is loaded only where it is used.)
# benchmarks/ and tests/ may reach inside.
BACK_DOORS: dict[tuple[str, str], str] = {}  # (file, module) -> why it is imported directly


def front_door_problems(path: Path, text: str | None = None) -> list[str]:
    """What ``path`` (or ``text`` as that file) imports from inside another layer's package."""
    layer = path.relative_to(ROOT).parts[0]
    problems = []
    for line, module, names in _imports(path, text):
        parts = module.split(".")
        if parts[0] != "kernelswarm" or len(parts) < 2 or parts[1] not in TIER \
                or parts[1] == layer:
            continue
        door = ".".join(parts[:2])
        inside = [module] if len(parts) > 2 else [
            f"{module}.{n}" for n in names or ()
            if _source_of(f"{module}.{n}") is not None and n not in defined_names(module)]
        problems += [f"{path.relative_to(ROOT)}:{line}: imports {target}, inside {door}; "
                     f"import what it needs from {door} (its __init__ exports it)"
                     for target in inside
                     if (str(path.relative_to(ROOT)), target) not in BACK_DOORS]
    return problems


@pytest.mark.parametrize("layer", ALL_LAYERS)
def test_a_layer_enters_another_through_its_package(layer):
    problems = [p for path in _files(layer) for p in front_door_problems(path)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("layer", ALL_LAYERS)
def test_every_name_a_front_door_lists_is_there(layer):
    """A name made on first use (evaluators/, agents/) comes from a module that defines it."""
    package = importlib.import_module(f"kernelswarm.{layer}")
    missing = [name for name in getattr(package, "__all__", ()) if not hasattr(package, name)]
    assert not missing, f"kernelswarm.{layer}.__all__ lists what it cannot give: {missing}"


def test_the_front_door_check_can_fail():
    probe = ROOT / "experiments" / "run" / "probe.py"
    assert front_door_problems(probe, "def f():\n    from ...evaluators.settings import "
                                      "EvaluatorSettings\n    from kernelswarm.search import "
                                      "tuning\n") == [
        "experiments/run/probe.py:2: imports kernelswarm.evaluators.settings, inside "
        "kernelswarm.evaluators; import what it needs from kernelswarm.evaluators (its "
        "__init__ exports it)",
        "experiments/run/probe.py:3: imports kernelswarm.search.tuning, inside "
        "kernelswarm.search; import what it needs from kernelswarm.search (its __init__ "
        "exports it)"]
    # a name the package defines (even one a module of it shares) and its own layer are fine
    assert front_door_problems(probe, "from kernelswarm.search import language_spec, Task\n"
                                      "from kernelswarm.evaluators import SandboxEvaluator\n"
                                      "from .folder import RunFolder\n"
                                      "from kernelswarm.experiments.sinks import parquet\n") == []
    assert [(f, m) for f, m in BACK_DOORS if not (ROOT / f).is_file()
            or not any(m == found for _, found in imported_modules(ROOT / f))] == []


def test_the_architecture_page_states_these_layers():
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```\n(.*?)```", section, re.S)
    assert block, "docs/architecture.md: the Layers section has no code block"
    stated = []
    for line in block.group(1).splitlines():
        names = re.match(r"((?:\w+/\s*)+)", line)
        if names:
            stated.append(tuple(re.findall(r"(\w+)/", names.group(1))))
    assert stated == [tuple(sorted(t)) for t in reversed(LAYERS)], (
        f"docs/architecture.md lists the tiers {stated}, top first; tests/test_layering.py "
        f"says {list(reversed(LAYERS))}")


def _packaged() -> tuple[list[str], dict[str, str]]:
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return setuptools["packages"], setuptools["package-dir"]


def test_every_package_folder_is_installed_from_its_folder():
    """pyproject.toml lists the subpackages one by one: a folder left out works in an editable
    checkout and is missing from a wheel."""
    packages, folders = _packaged()
    wanted = {".".join(("kernelswarm", *init.parent.relative_to(ROOT).parts))
              for layer in ALL_LAYERS for init in (ROOT / layer).rglob("__init__.py")
              if "tasks" not in init.relative_to(ROOT).parts}
    assert sorted(wanted - set(packages)) == []
    assert sorted(set(packages) - wanted) == []
    for package in packages:
        assert folders.get(package) == "/".join(package.split(".")[1:]), package
