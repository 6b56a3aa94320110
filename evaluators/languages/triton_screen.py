"""The static screen of Python kernel modules (the ``triton`` language), on the syntax tree.

A Python kernel module runs in the runner next to the timing of its calls, so what it may use is
an allow-list rather than a list of dangers: it imports only triton, ``triton.language`` (and its
submodules), torch, math and typing, and reaches no other module through them (``torch.os``,
``torch.sys``, ``torch.builtins``: torch holds those as attributes); it uses modules only as
``module.name`` (never as a value that could be passed around under another name); it sets no
attributes, defines no classes and reaches no private or dunder names; and of torch and triton
it may not touch what would move work out of the timer's sight (streams, events, graphs,
``torch.compile``, custom ops), change global state the reference shares (``torch.set_*``,
``torch.backends``), or drive triton's launch and benchmarking machinery (``triton.runtime``,
``triton.autotune``, ...); and its kernels may not read the GPU's clocks or run inline assembly.

PyTorch *compute* (``torch.mul``, ``x * y``) is not screened: the sandbox watches every call of a
Python kernel and rejects one that computes with PyTorch (evaluators/integrity.py).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
from collections.abc import Iterator

from .screen import SyntaxRule

ALLOWED_IMPORTS = ("triton", "triton.language", "torch", "math", "typing", "__future__")
_ALLOWED_IMPORT_PREFIXES = ("triton.language.",)

# Builtins that run strings as code, reach objects by name, build classes or touch files.
FORBIDDEN_BUILTINS = frozenset({
    "eval", "exec", "compile", "__import__", "open", "globals", "locals", "vars", "getattr",
    "setattr", "delattr", "breakpoint", "exit", "quit", "input", "help", "type", "super",
    "memoryview", "classmethod", "staticmethod", "property",
})

# Dotted names a kernel module may not use; an entry ending in "_" is a prefix of names
# (torch.set_ covers torch.set_num_threads), any other covers itself and what is below it.
STREAMS_EVENTS_GRAPHS = (
    "torch.Stream", "torch.Event", "torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.Event",
    "torch.cuda.ExternalStream", "torch.cuda.set_stream", "torch.cuda.streams",
    "torch.cuda.StreamContext", "torch.cuda.default_stream", "torch.cuda.graph",
    "torch.cuda.graphs", "torch.cuda.CUDAGraph", "torch.cuda.make_graphed_callables",
    "torch.cpu.Stream", "torch.cpu.stream", "torch.cpu.StreamContext", "torch.accelerator",
)
TORCH_ESCAPE_HATCHES = (
    "torch.compile", "torch.jit", "torch.ops", "torch.library", "torch.utils", "torch.autograd",
    "torch.overrides", "torch.fx", "torch.export", "torch.func", "torch.classes",
    "torch.cuda.jiterator", "torch.cuda.cudart", "torch.cuda.nvtx", "torch.profiler",
    "torch.testing",
)
TORCH_GLOBAL_STATE = (
    "torch.set_", "torch.use_", "torch.backends", "torch.manual_seed", "torch.seed",
    "torch.random", "torch.cuda.random", "torch.cuda.set_", "torch.cuda.manual_seed",
    "torch.cuda.memory", "torch.cuda.tunable", "torch.cuda.empty_cache",
)
TORCH_IO = ("torch.load", "torch.save", "torch.from_file", "torch.hub", "torch.multiprocessing",
            "torch.distributed", "torch.package")
TRITON_INTERNALS = ("triton.runtime", "triton.testing", "triton.tools", "triton.knobs",
                    "triton.compiler", "triton.backends", "triton.set_allocator",
                    "triton.profiler", "triton.autotune", "triton.Config")

# Modules that torch, triton and typing hold as attributes (``torch.os``, ``torch.sys``,
# ``torch.builtins``, ``typing.sys``, ``torch.nn.functional.np``, ...): reaching one through a
# dotted chain is importing it. Any standard-library module name counts, and the third-party
# modules torch re-exports; a few names are both a standard module and a tensor operation or a
# triton.language module, and stay allowed (torch.random is refused as global state). Modules
# held under other names are found by following the chain in the installed torch and triton.
FOREIGN_MODULES = (frozenset(sys.stdlib_module_names) | {"np", "numpy", "pynvml", "stdlib_re",
                                                         "sympy", "typing_extensions"}) \
    - {"math", "random", "select", "trace", "chunk"}

# Inside a kernel: reading the GPU's clocks, or inline assembly (which can read them too), would
# let a kernel tell when it is timed; device printing floods the log and distorts the timing.
KERNEL_CLOCKS_AND_ASSEMBLY = frozenset({"globaltimer", "inline_asm_elementwise", "device_print"})

# Modules that a name may stand for even when bound by ``from x import y``.
_MODULE_PATHS = frozenset({"torch", "torch.cuda", "torch.cpu", "triton", "triton.language"})


def _covers(entry: str, dotted: str) -> bool:
    if entry.endswith("_"):
        return dotted.startswith(entry)
    return dotted == entry or dotted.startswith(entry + ".")


class ModuleView:
    """What the rules need to know about one module: import aliases and each node's parent."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.parents: dict[ast.AST, ast.AST] = {}
        self.aliases: dict[str, str] = {}  # local name -> dotted module path it stands for
        self.module_names: set[str] = set()  # local names bound to a module
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node
            if isinstance(node, ast.Import):
                for alias in node.names:
                    local = alias.asname or alias.name.split(".")[0]
                    self.aliases[local] = alias.name if alias.asname else local
                    self.module_names.add(local)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    dotted = f"{node.module}.{alias.name}"
                    local = alias.asname or alias.name
                    self.aliases[local] = dotted
                    if dotted in _MODULE_PATHS:
                        self.module_names.add(local)

    def dotted(self, node: ast.AST) -> str | None:
        """``torch.cuda.Event`` for an attribute chain rooted at an imported name, else None."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.aliases:
            return None
        return ".".join([self.aliases[node.id], *reversed(parts)])

    def used_names(self) -> Iterator[tuple[ast.AST, str]]:
        """Every dotted name the module uses: its imports and its longest attribute chains."""
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    yield node, f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    yield node, alias.name
            elif isinstance(node, (ast.Attribute, ast.Name)):
                parent = self.parents.get(node)
                if isinstance(parent, ast.Attribute) and parent.value is node:
                    continue  # the longer chain above is checked instead
                dotted = self.dotted(node)
                if dotted is not None:
                    yield node, dotted


def _dotted_rule(name: str, entries: tuple[str, ...], reason: str) -> SyntaxRule:
    def find(tree: ast.Module) -> Iterator[ast.AST]:
        for node, dotted in ModuleView(tree).used_names():
            if any(_covers(entry, dotted) for entry in entries):
                yield node

    return SyntaxRule(name, reason, find)


def _find_clocks_and_assembly(tree: ast.Module) -> Iterator[ast.AST]:
    for node, dotted in ModuleView(tree).used_names():
        if dotted.startswith("triton.") and dotted.rsplit(".", 1)[-1] in KERNEL_CLOCKS_AND_ASSEMBLY:
            yield node


def _reaches_foreign_module(dotted: str) -> bool:
    """Whether following ``dotted`` attribute by attribute, in this process's torch and triton,
    passes through a module that is neither (``torch.nn.modules.container.container_abcs`` is
    ``collections.abc`` under another name). Only the allowed modules are imported to find out."""
    parts = dotted.split(".")
    if parts[0] not in ("torch", "triton", "math", "typing"):
        return False
    try:
        value = importlib.import_module(parts[0])
        for part in parts[1:]:
            value = getattr(value, part)
            if inspect.ismodule(value) and value.__name__.split(".")[0] not in ("torch",
                                                                                  "triton"):
                return True
    except Exception:  # noqa: BLE001 - a name this version lacks fails at run time instead
        return False
    return False


def _find_foreign_modules(tree: ast.Module) -> Iterator[ast.AST]:
    for node, dotted in ModuleView(tree).used_names():
        if (any(part in FOREIGN_MODULES for part in dotted.split(".")[1:])
                or _reaches_foreign_module(dotted)):
            yield node


def _find_imports(tree: ast.Module) -> Iterator[ast.AST]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level or node.module is None or any(a.name == "*" for a in node.names):
                yield node
                continue
            modules = [node.module]
        else:
            continue
        if not all(m in ALLOWED_IMPORTS or m.startswith(_ALLOWED_IMPORT_PREFIXES)
                   for m in modules):
            yield node


def _find_builtins(tree: ast.Module) -> Iterator[ast.AST]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and (node.id in FORBIDDEN_BUILTINS
                                           or (node.id.startswith("__")
                                               and node.id.endswith("__"))):
            yield node


def _find_private(tree: ast.Module) -> Iterator[ast.AST]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            yield node
        elif isinstance(node, ast.ImportFrom) and any(a.name.startswith("_")
                                                      for a in node.names):
            yield node


# Tensor methods that hand the host the data itself, outside the dispatcher (and so outside the
# compute guard): a NumPy view of an output can be written with NumPy arithmetic.
HOST_DATA_ACCESS = frozenset({"numpy", "tolist", "storage", "untyped_storage", "share_memory_"})


def _find_host_data_access(tree: ast.Module) -> Iterator[ast.AST]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in HOST_DATA_ACCESS:
            yield node


# Attributes of generators, coroutines, frames, tracebacks and code objects: from a running
# generator, ``gi_frame.f_back`` walks up to the caller (telling checking from timing) and
# ``f_globals`` reaches the runner's own objects.
FRAME_ATTRIBUTES = frozenset({
    "gi_frame", "gi_code", "gi_yieldfrom", "gi_running", "gi_suspended", "cr_frame", "cr_code",
    "cr_await", "cr_origin", "cr_running", "cr_suspended", "ag_frame", "ag_code", "ag_await",
    "ag_running", "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "f_lasti",
    "f_lineno", "f_trace", "f_trace_lines", "f_trace_opcodes", "tb_frame", "tb_next",
    "tb_lasti", "tb_lineno", "co_code", "co_consts", "co_names", "co_varnames", "co_name",
    "co_qualname", "co_filename", "co_firstlineno", "co_lines", "co_positions",
    "with_traceback",
})


def _find_frame_access(tree: ast.Module) -> Iterator[ast.AST]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in FRAME_ATTRIBUTES:
            yield node


def _find_attribute_writes(tree: ast.Module) -> Iterator[ast.AST]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            yield node


def _find_classes(tree: ast.Module) -> Iterator[ast.AST]:
    return (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef))


def _find_modules_as_values(tree: ast.Module) -> Iterator[ast.AST]:
    view = ModuleView(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in view.module_names:
            parent = view.parents.get(node)
            if not (isinstance(parent, ast.Attribute) and parent.value is node):
                yield node


TRITON_SCREEN_RULES = (
    SyntaxRule("imports", "a kernel module may import only triton, triton.language (and its "
               "submodules), torch, math and typing: os, sys, subprocess, threading, socket, "
               "ctypes, time and the like reach outside the kernel or the measurement",
               _find_imports),
    SyntaxRule("modules reached through attributes", "torch, triton and typing hold other "
               "modules as attributes (torch.os, torch.sys, torch.builtins, "
               "torch.nn.functional.np, ...): using one is importing it, and only triton, torch, "
               "math and typing may be imported", _find_foreign_modules),
    SyntaxRule("dynamic code", "eval/exec/compile, open, getattr/setattr, globals/vars and "
               "dunder names run strings as code, touch files or reach objects the screen "
               "cannot follow", _find_builtins),
    SyntaxRule("private names", "private (underscore) attributes of torch and triton can switch "
               "off the evaluator's checks or reach its internals", _find_private),
    SyntaxRule("attribute assignment", "a kernel module may not set or delete attributes: "
               "patching time, torch or triton, or rebinding a tensor (`out.data = ...`), "
               "changes what the evaluator measures or checks", _find_attribute_writes),
    SyntaxRule("host access to tensor data", "the work belongs in the Triton kernels: a NumPy "
               "view or a list of a tensor lets the host compute out of the sandbox's sight",
               _find_host_data_access),
    SyntaxRule("frames and code objects", "generator, frame, traceback and code attributes "
               "(gi_frame, f_back, f_globals, tb_frame, ...) walk up to the caller and its "
               "globals: a kernel may not inspect who called it", _find_frame_access),
    SyntaxRule("classes", "a kernel module defines functions only: a class could subclass "
               "torch.Tensor (a lazy or fake output) or hook __torch_function__",
               _find_classes),
    SyntaxRule("modules as values", "use a module only as `module.name`: a module passed or "
               "stored under another name hides what is called from the screen",
               _find_modules_as_values),
    _dotted_rule("streams, events and graphs", STREAMS_EVENTS_GRAPHS,
                 "work on another stream or in a graph escapes the timer, and events are the "
                 "timer's own; launch on the current stream"),
    _dotted_rule("PyTorch escape hatches", TORCH_ESCAPE_HATCHES,
                 "compiled graphs, custom ops and dispatch controls could compute with PyTorch "
                 "out of the evaluator's sight, or switch its checks off"),
    _dotted_rule("global PyTorch state", TORCH_GLOBAL_STATE,
                 "the kernel shares its process with the reference: changing PyTorch's global "
                 "settings (threads, precision, seeds, backends) changes the reference or the "
                 "measurement"),
    _dotted_rule("files and processes", TORCH_IO,
                 "a kernel reads its inputs and writes its outputs only"),
    SyntaxRule("clocks and inline assembly", "a kernel may not read the GPU's clocks or run "
               "inline assembly (which can read them): it could tell when it is being timed; "
               "device printing distorts the timing", _find_clocks_and_assembly),
    _dotted_rule("triton internals", TRITON_INTERNALS,
                 "the runtime, its knobs and benchmarking utilities reach into the launch "
                 "machinery or time inside the measurement; tune through the task's knobs, "
                 "not triton.autotune"),
)
