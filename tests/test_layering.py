"""The layering of kernelswarm, stated once (``LAYERS``) and checked on the source.

docs/architecture.md quotes ``LAYERS`` (its "Layers" block lists the same folders, top tier
first); ``test_the_architecture_page_states_these_layers`` keeps the two in agreement. Imports
are read from every file, inside functions too, with relative imports resolved to the module
they name (``from ..search import x`` in evaluators/ is an import of ``kernelswarm.search``).
"""

from __future__ import annotations

import ast
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


def imported_modules(path: Path, text: str | None = None) -> Iterator[tuple[int, str]]:
    """``(line, absolute module name)`` of every import in ``path`` (or in ``text``, read as
    if it were that file), relative ones resolved; ``from package import name`` also yields
    ``package.name`` where that is a module of the tree."""
    source = path.read_text() if text is None else text
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
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
            yield node.lineno, module
            for alias in node.names:
                if _source_of(f"{module}.{alias.name}") is not None:
                    yield node.lineno, f"{module}.{alias.name}"


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
