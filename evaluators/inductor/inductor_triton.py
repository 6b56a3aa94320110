"""A ``triton`` starting kernel from Inductor's Triton code, one version per shape.

Inductor's Triton kernels (``triton_poi_*`` pointwise, ``triton_red_*`` looped reductions,
``triton_per_*`` persistent reductions) are ``@triton.jit`` functions with their sizes as
literals, wrapped in Inductor's launch heuristics (``@triton_heuristics.*``), which pick block
sizes and warps by autotuning at run time. The module written here keeps each kernel's
``@triton.jit`` function, renamed per shape, and replaces what a kernel module may not import:

- Inductor's runtime helpers (``triton_helpers.maximum``, ``online_softmax_reduce``,
  ``welford_combine`` and the rest) by their own definitions, copied from the installed torch's
  ``torch._inductor.runtime.triton_helpers`` with the helpers they call (``inductor_helpers``),
  so the start follows the Inductor that wrote the kernels; ``tl_math`` by ``tl.math``;
  ``libdevice`` by ``triton.language.extra``'s;
- the heuristics by knobs: the block sizes and warps the launch uses become the entry point's
  keyword arguments (``XBLOCK``, ``TILE_X``/``TILE_Y`` for 2-D pointwise tiles, ``RED_XBLOCK``/
  ``RED_RBLOCK`` for looped reductions, ``PER_XBLOCK`` for persistent ones, ``NUM_WARPS``), each
  declared with the values the tuner picks from. The first, 0, launches a kernel as Inductor's
  runtime chose to on that shape (the config its autotuning kept, recorded when the reference
  was compiled; ``num_stages`` too), so the start is ``torch.compile``'s kernel, launched as it
  launches it. Each tuning shape's version has knobs of its own (suffixed ``_S<i>`` where there
  are several, named in the file's ``kernelswarm shape knobs:`` line): a shape's time depends on
  its own knobs alone, so the best setting of each shape can be read off candidates that change
  them all at once (agents/builtin/dispatch_move.py). A persistent reduction's ``R0_BLOCK`` is
  the reduction's size rounded up to a power of two;
- ``call``'s steps by plain Python: scratch buffers by ``torch.empty_strided``, kernel launches
  with their grids, outputs copied by a strided-copy kernel where the graph returns a view.

The entry point takes the task's ``launch_triton`` arguments (and the knobs) and runs the
version whose numbers and tensor sizes are the call's; any other call raises ``ValueError``.
"""

from __future__ import annotations

import ast
import builtins
import functools
import math
import re
from collections.abc import Mapping

from ...search import shape_knob_line
from .inductor_code import (
    ArgKind,
    GenerationError,
    Kernel,
    Launch,
    ShapeCode,
    View,
    contiguous_strides,
    distinct,
)

# Knobs by kind of kernel: the values tuning tries besides 0, the start's value, which launches
# each kernel as Inductor's runtime chose to on its shape (``ShapeCode.launch_configs``), or,
# where no choice was recorded, with the first value here. (name in the kernel -> knob name)
KNOB_VALUES: Mapping[str, tuple[int, ...]] = {
    "XBLOCK": (1024, 128, 256, 512, 2048),
    "TILE_X": (32, 16, 64, 128),
    "TILE_Y": (32, 16, 64),
    "RED_XBLOCK": (1, 2, 4, 8, 16),
    "RED_RBLOCK": (1024, 128, 256, 512, 2048),
    "PER_XBLOCK": (1, 2, 4, 8),
    "NUM_WARPS": (4, 1, 2, 8),
}
AS_COMPILED = 0  # a knob's value meaning "as Inductor chose for this kernel on this shape"
_KNOB_NAMES = {"XBLOCK", "YBLOCK", "R0_BLOCK", "RBLOCK"}  # block sizes a config may carry
_COPY_BLOCK = 1024
_MAX_COPY_DIMS = 4

HELPERS = '''\
@triton.jit
def copy_view(src, dst, numel, offset, n1, n2, n3, t0, t1, t2, t3, BLOCK: tl.constexpr):
    # dst (contiguous, numel elements) = the view of src with sizes (*, n1, n2, n3), strides
    # (t0, t1, t2, t3) and offset: an output the graph returns as a view of a buffer
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = i < numel
    i3 = i % n3
    rest = i // n3
    i2 = rest % n2
    rest = rest // n2
    i1 = rest % n1
    i0 = rest // n1
    value = tl.load(src + offset + i0 * t0 + i1 * t1 + i2 * t2 + i3 * t3, mask=mask)
    tl.store(dst + i, value, mask=mask)
'''
HELPERS_MODULE = "torch._inductor.runtime.triton_helpers"
# What the helpers' module imports from Inductor's triton_compat, as a kernel module names it.
_HELPER_GLOBALS = {"tl", "triton", "libdevice", "math"}
_FIXED_BLOCK = re.compile(r"^\s*([XYZ]BLOCK|R0_BLOCK|RBLOCK)\s*:\s*tl\.constexpr\s*=\s*(\d+)\s*$",
                          re.M)
_OFFSET = re.compile(r"\b([xyz])offset\s*=\s*\(?\s*tl\.program_id\((\d)\)")
_DTYPES = {"float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8",
           "uint8", "bool"}


def _kind(name: str) -> str:
    for prefix, kind in (("triton_poi_", "pointwise"), ("triton_red_", "reduction"),
                         ("triton_per_", "persistent"), ("triton_tem_", "template")):
        if name.startswith(prefix):
            return kind
    raise GenerationError(f"kernel {name} is not one of Inductor's pointwise, reduction or "
                          f"template kernels (triton_poi_, triton_red_, triton_per_, "
                          f"triton_tem_): another kind (a split scan, triton_spl_), which the "
                          f"generated start does not launch")


def _template_settings(function: ast.FunctionDef) -> dict[str, int]:
    """``num_warps`` and ``num_stages`` of a template's ``@triton_heuristics.template(...)``:
    its tile sizes are constants of its body, its launch settings are the decorator's."""
    for decorator in function.decorator_list:
        if isinstance(decorator, ast.Call) and ast.unparse(decorator.func).endswith(".template"):
            return {k.arg: k.value.value for k in decorator.keywords
                    if k.arg in ("num_warps", "num_stages") and isinstance(k.value, ast.Constant)
                    and isinstance(k.value.value, int)}
    return {}


class _Jit:
    """One Inductor Triton kernel: its functions (renamed), parameters and grid axes."""

    def __init__(self, kernel: Kernel, prefix: str) -> None:
        self.name, self.kind = kernel.name, _kind(kernel.name)
        try:
            tree = ast.parse(kernel.source)
        except SyntaxError as exc:
            raise GenerationError(f"kernel {kernel.name} is not Python: {exc}") from None
        functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
        main = [f for f in functions if f.name == kernel.name]
        if not main:
            raise GenerationError(f"kernel {kernel.name}: its source defines no function of "
                                  f"that name")
        lines = kernel.source.splitlines()
        renames = {f.name: f"{prefix}{f.name}" for f in functions}
        texts = []
        for function in functions:
            text = "\n".join(lines[function.lineno - 1:function.end_lineno])
            texts.append("@triton.jit\n" + _rename(_rewrite(text, kernel.name), renames))
        self.source = "\n\n\n".join(texts)
        self.symbol = renames[kernel.name]
        arguments = main[0].args.args
        self.params = [a.arg for a in arguments if not _is_constexpr(a.annotation)]
        self.constexprs = [a.arg for a in arguments if _is_constexpr(a.annotation)]
        self.axes = {axis: int(pid) for axis, pid in _OFFSET.findall(kernel.source)}
        # block sizes the body sets itself (XBLOCK = 1 for one row per program): fixed
        self.fixed = dict(_FIXED_BLOCK.findall(kernel.source))
        self.template = _template_settings(main[0]) if self.kind == "template" else {}

    def knobs(self) -> list[str]:
        used = ["NUM_WARPS"]
        numel: dict[str, object] = {"r0_numel": 1}
        for name in self.constexprs:
            if name not in self.fixed:
                block = self._block(name, numel)
                used += [block] if block in KNOB_VALUES else []
        return used

    def launch(self, launch: Launch, args: list[str], chosen: Mapping[str, int]) -> str:
        """The Python line launching this kernel with ``args`` (already rendered); a knob at
        ``AS_COMPILED`` takes the value ``chosen`` (Inductor's config on this shape) has for
        it, else its first value in ``KNOB_VALUES``."""
        if self.kind == "template":
            return self._launch_template(launch, args, chosen)
        if len(args) != len(self.params):
            raise GenerationError(f"{self.name} takes {len(self.params)} arguments, call() "
                                  f"passes {len(args)}")
        numel = {p: a for p, a in zip(self.params, launch.args, strict=True)
                 if p.endswith("numel")}
        blocks = {}
        for name in self.constexprs:
            block = self.fixed.get(name) or self._block(name, numel)
            if block in KNOB_VALUES:
                default = chosen.get(name) if name in _KNOB_NAMES else None
                block = f"({block} or {default or KNOB_VALUES[block][0]})"
            blocks[name] = block
        grid: list[object] = [1, 1, 1]
        for axis, block in (("x", "XBLOCK"), ("y", "YBLOCK")):
            size = self.fixed.get(block) or blocks.get(block)
            if f"{axis}numel" in numel and size:
                pid = self.axes.get(axis, 0 if axis == "x" else 1)
                grid[pid] = f"triton.cdiv({numel[f'{axis}numel']}, {size})"
        while len(grid) > 1 and grid[-1] == 1:
            grid.pop()
        keywords = "".join(f", {k}={v}" for k, v in blocks.items())
        warps = f"(NUM_WARPS or {chosen.get('num_warps') or KNOB_VALUES['NUM_WARPS'][0]})"
        stages = f", num_stages={chosen['num_stages']}" if chosen.get("num_stages") else ""
        return (f"{self.symbol}[({', '.join(map(str, grid))},)]({', '.join(args)}{keywords}, "
                f"num_warps={warps}{stages})")

    def _launch_template(self, launch: Launch, args: list[str], chosen: Mapping[str, int]
                         ) -> str:
        """A template's launch: its arguments, then the grid call() passes after them (three
        numbers: a template's grid is computed when Inductor writes it); its warps a knob
        whose 0 is the template's own, its stages the template's."""
        grid = launch.args[len(self.params):]
        if len(grid) != 3 or not all(isinstance(g, int) for g in grid):
            raise GenerationError(f"{self.name} takes {len(self.params)} arguments, call() "
                                  f"passes {len(args)}: not those and a grid of three numbers")
        settings = {**self.template, **{k: v for k, v in chosen.items()
                                        if k in ("num_warps", "num_stages")}}
        warps = f"(NUM_WARPS or {settings.get('num_warps') or KNOB_VALUES['NUM_WARPS'][0]})"
        stages = f", num_stages={settings['num_stages']}" if settings.get("num_stages") else ""
        return (f"{self.symbol}[{tuple(grid)!r}]({', '.join(args[:len(self.params)])}, "
                f"num_warps={warps}{stages})")

    def _block(self, name: str, numel: Mapping[str, object]) -> str:
        if self.kind == "template":
            raise GenerationError(f"{self.name}: a template whose signature takes the block "
                                  f"size {name}; a template's tile is a constant of its body")
        if name == "XBLOCK":
            return {"pointwise": "TILE_X" if "YBLOCK" in self.constexprs else "XBLOCK",
                    "reduction": "RED_XBLOCK", "persistent": "PER_XBLOCK"}[self.kind]
        if name == "YBLOCK":
            return "TILE_Y"
        if name in ("R0_BLOCK", "RBLOCK"):
            if self.kind == "reduction":
                return "RED_RBLOCK"
            size = numel.get("r0_numel", numel.get("rnumel"))
            if not isinstance(size, int):
                raise GenerationError(f"{self.name}: no reduction size for {name}")
            return str(1 << max(0, math.ceil(math.log2(max(size, 1)))))
        raise GenerationError(f"{self.name}: block size {name} has no launch rule here (only "
                              f"XBLOCK, YBLOCK and R0_BLOCK)")


def _is_constexpr(annotation: ast.expr | None) -> bool:
    return annotation is not None and ast.unparse(annotation).endswith("constexpr")


def _rename(text: str, renames: Mapping[str, str]) -> str:
    for old, new in renames.items():
        text = re.sub(rf"\b{re.escape(old)}\b", new, text)
    return text


def _rewrite(text: str, name: str) -> str:
    """A kernel's text with Inductor's runtime helpers renamed to the module's copies of them
    (``inductor_helpers``) and ``tl_math`` to ``tl.math``."""
    inductor_helpers(set(re.findall(r"\btriton_helpers\.(\w+)", text)), name)  # or refuse
    text = re.sub(r"\btriton_helpers\.(\w+)", r"helper_\1", text)
    text = re.sub(r"\btl_math\.", "tl.math.", text)
    return text


def helpers_used(text: str) -> set[str]:
    """The ``helper_*`` functions a generated kernel's text calls (without the prefix)."""
    return set(re.findall(r"\bhelper_(\w+)", text))


def inductor_helpers(names: set[str], kernel: str = "") -> str:
    """The source of Inductor's runtime helpers ``names`` and of every helper they call,
    copied from the installed torch's ``triton_helpers`` module as ``helper_<name>`` (a kernel
    module may not import Inductor's runtime); its constants become literals. A helper that is
    not a plain ``@triton.jit`` function, or that needs something of the runtime a kernel module
    cannot have, is a ``GenerationError`` naming it."""
    where = f"kernel {kernel} uses " if kernel else ""
    module, functions, constants = _helpers_module()
    wanted, order = list(sorted(names)), []
    used_constants: set[str] = set()
    while wanted:
        name = wanted.pop(0)
        if name in order:
            continue
        node = functions.get(name)
        if node is None:
            raise GenerationError(f"{where}Inductor's triton_helpers.{name}, which this torch's "
                                  f"{HELPERS_MODULE} does not define")
        decorators = [ast.unparse(d) for d in node.decorator_list]
        if decorators != ["triton.jit"]:
            raise GenerationError(f"{where}Inductor's triton_helpers.{name}, which is not a "
                                  f"plain @triton.jit function ({', '.join(decorators) or 'none'}"
                                  f"): the generated module cannot copy it")
        order.append(name)
        local = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)} | {
            n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        for ref in {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} - local:
            if ref in functions:
                wanted.append(ref)
            elif ref in constants:
                used_constants.add(ref)
            elif ref not in _HELPER_GLOBALS and not hasattr(builtins, ref):
                raise GenerationError(f"{where}Inductor's triton_helpers.{name}, which needs "
                                      f"{ref!r} of Inductor's runtime: the generated module "
                                      f"cannot have it")
    renames = {n: f"helper_{n}" for n in order}
    lines = [_constant(module, c) for c in sorted(used_constants)]
    for name in order:
        node = _Renamer(renames).visit(ast.parse(ast.unparse(functions[name])).body[0])
        lines.append(ast.unparse(ast.fix_missing_locations(node)) + "\n")
    return "\n\n".join(lines) + ("\n" if lines else "")


@functools.cache
def _helpers_module() -> tuple[object, dict[str, ast.FunctionDef], set[str]]:
    """Inductor's helpers module, its functions' syntax trees and its constants' names."""
    import importlib
    import inspect

    module = importlib.import_module(HELPERS_MODULE)
    tree = ast.parse(inspect.getsource(module))
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    constants = {t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                 for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                 if isinstance(t, ast.Name)}
    return module, functions, constants


def _constant(module: object, name: str) -> str:
    value = getattr(module, name)
    inner = getattr(value, "value", value)  # a tl.constexpr holds its value
    if not isinstance(inner, (int, float, bool)):
        raise GenerationError(f"Inductor's triton_helpers.{name} is {type(value).__name__}, "
                              f"which the generated module cannot copy as a literal")
    if inner is not value:
        return f"{name}: tl.constexpr = tl.constexpr({inner!r})\n"
    return f"{name} = {inner!r}\n"


class _Renamer(ast.NodeTransformer):
    """Helpers renamed to their copies; the runtime's ``math`` (Triton's) to ``tl.math``."""

    def __init__(self, renames: Mapping[str, str]) -> None:
        self.renames = renames

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        node.name = self.renames.get(node.name, node.name)
        self.generic_visit(node)
        return node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.renames:
            return ast.copy_location(ast.Name(self.renames[node.id], node.ctx), node)
        if node.id == "math":
            return ast.copy_location(ast.Attribute(ast.Name("tl", ast.Load()), "math", node.ctx),
                                     node)
        return node


def _python_view(view: View, roots: Mapping[str, str]) -> str:
    base = roots[view.root]
    if not view.offset:
        return base
    return f"{base}.as_strided({view.size!r}, {view.stride!r}, {base}.storage_offset() + " \
           f"{view.offset})"


class _Version:
    """The Python of one shape: its kernels and the body of its ``run``."""

    def __init__(self, index: int, shape: ShapeCode) -> None:
        self.prefix, self.shape = f"s{index}_", shape
        code = shape.code
        self.jits = {name: _Jit(k, f"{self.prefix}") for name, k in code.kernels.items()
                     if k.language == "triton"}
        self.roots: dict[str, str] = {}
        for k, view in enumerate(code.inputs):
            self.roots[view.root] = f"a{shape.position(ArgKind.INPUT, shape.graph_inputs[k])}"
        self.copies: list[tuple[int, View]] = []
        if len(code.returns) != len(shape.outputs):
            raise GenerationError(f"shape {shape.label}: the graph returns {len(code.returns)} "
                                  f"tensors, make_outputs makes {len(shape.outputs)}")
        for j, view in enumerate(code.returns):
            alloc = code.allocs.get(view.root)
            size, dtype = shape.outputs[j]
            whole = alloc is not None and view.root not in self.roots and not view.offset \
                and (view.size, view.stride) == (alloc.size, alloc.stride) \
                and alloc.stride == contiguous_strides(alloc.size) and alloc.dtype == dtype \
                and math.prod(alloc.size) == math.prod(size) == alloc.numel
            if whole:
                self.roots[view.root] = f"a{shape.position(ArgKind.OUTPUT, j)}"
            else:
                self.copies.append((j, view))

    def knobs(self) -> list[str]:
        return [k for jit in self.jits.values() for k in jit.knobs()]

    def body(self, device: str) -> list[str]:
        code, lines = self.shape.code, []
        for name, alloc in code.allocs.items():
            if name not in self.roots:
                if alloc.dtype not in _DTYPES:
                    raise GenerationError(f"shape {self.shape.label}: buffer dtype {alloc.dtype}")
                lines.append(f"    {name} = torch.empty_strided({alloc.size!r}, "
                             f"{alloc.stride!r}, dtype=torch.{alloc.dtype}, device={device})")
                self.roots[name] = name
        for launch in code.launches:
            if launch.kernel not in self.jits:
                raise GenerationError(f"shape {self.shape.label}: {launch.kernel} is not a "
                                      f"Triton kernel")
            args = [_python_view(a, self.roots) if isinstance(a, View) else repr(a)
                    for a in launch.args]
            lines.append("    " + self.jits[launch.kernel].launch(
                launch, args, self.shape.launch_config(launch.kernel)))
        for j, view in self.copies:
            lines.append("    " + self._copy(j, view))
        return lines or ["    pass"]

    def _copy(self, j: int, view: View) -> str:
        if len(view.size) > _MAX_COPY_DIMS:
            raise GenerationError(f"shape {self.shape.label}: output {j} is a view of "
                                  f"{len(view.size)} dimensions (at most {_MAX_COPY_DIMS})")
        if math.prod(view.size) != math.prod(self.shape.outputs[j][0]):
            raise GenerationError(f"shape {self.shape.label}: output {j} and the returned view "
                                  f"differ in size")
        pad = _MAX_COPY_DIMS - len(view.size)
        sizes = (1,) * pad + view.size
        strides = (0,) * pad + view.stride
        numel = math.prod(view.size)
        target = f"a{self.shape.position(ArgKind.OUTPUT, j)}"
        return (f"copy_view[(triton.cdiv({numel}, {_COPY_BLOCK}),)]({self.roots[view.root]}, "
                f"{target}, {numel}, {view.offset}, {sizes[1]}, {sizes[2]}, {sizes[3]}, "
                f"{', '.join(map(str, strides))}, BLOCK={_COPY_BLOCK})")

    def condition(self) -> str:
        parts = []
        for i, argument in enumerate(self.shape.arguments):
            if argument.kind in (ArgKind.INPUT, ArgKind.OUTPUT):
                parts.append(f"tuple(a{i}.shape) == {self.shape.sizes_of(argument)!r}")
                dtype = self.shape.dtype_of(argument)
                if dtype in _DTYPES:  # shapes of the same sizes in two dtypes
                    parts.append(f"a{i}.dtype == torch.{dtype}")
            elif argument.kind is ArgKind.SCALAR:
                parts.append(f"a{i} == {argument.value[0]!r}")
            else:
                raise GenerationError(f"shape {self.shape.label}: argument {i} is an array; a "
                                      f"triton entry point takes tensors and numbers")
        return " and ".join(parts) or "True"


def knob_suffixes(labels: list[str], tuned: set[str] | None) -> dict[str, str]:
    """Each tuned version's knob suffix, by shape label: ``""`` when one version is tuned (its
    knobs keep their names), else ``_S<index>`` (the version's index in ``labels``)."""
    chosen = [i for i, label in enumerate(labels) if tuned is None or label in tuned]
    if len(chosen) == 1:
        return {labels[chosen[0]]: ""}
    return {labels[i]: f"_S{i}" for i in chosen}


def triton_start(entry: str, shapes: list[ShapeCode], tuned: set[str] | None = None
                 ) -> tuple[str, dict[str, tuple[int, ...]]]:
    """The ``triton`` module with entry point ``entry`` (a version per shape) and its knobs.

    The versions of the ``tuned`` shapes (labels; None: every shape) get knobs of their own
    (``knob_suffixes``), each first at ``AS_COMPILED``: the start launches every kernel as
    ``torch.compile`` does on its shape, and tuning one shape's knobs changes no other shape's
    kernel. The other versions (held-out and check shapes) launch as compiled, with no knob."""
    if not shapes:
        raise GenerationError("no shape to generate code for")
    shapes = distinct(shapes, tensors=True)
    versions = [_Version(i, shape) for i, shape in enumerate(shapes)]
    suffixes = knob_suffixes([v.shape.label for v in versions], tuned)
    knobs: dict[str, tuple[int, ...]] = {}
    calls = []
    for version in versions:
        used = [k for k in KNOB_VALUES if k in version.knobs()]
        suffix = suffixes.get(version.shape.label)
        for k in used:
            if suffix is not None:
                knobs[k + suffix] = (AS_COMPILED, *KNOB_VALUES[k])
        calls.append("".join(f", {k}{suffix}" if suffix is not None else f", {AS_COMPILED}"
                             for k in used))
    count = len(shapes[0].arguments)
    if any(len(s.arguments) != count for s in shapes):
        raise GenerationError("the launcher passes a different number of arguments per shape")
    params = ", ".join(f"a{i}" for i in range(count))
    knob_params = "".join(f", {k}={v[0]}" for k, v in knobs.items())
    tensor = next((f"a{i}" for i, a in enumerate(shapes[0].arguments)
                   if a.kind in (ArgKind.INPUT, ArgKind.OUTPUT)), None)
    if tensor is None:
        raise GenerationError("the launcher passes no tensor")
    helpers = inductor_helpers(set().union(
        *(helpers_used(j.source) for v in versions for j in v.jits.values())))
    needs_libdevice = "libdevice." in helpers or any(
        "libdevice." in j.source for v in versions for j in v.jits.values())
    lines = ["# Generated by kernelswarm from torch.compile (Inductor's Triton code) for the "
             "shapes",
             f"# {', '.join(s.label for s in shapes)}; another shape raises ValueError.",
             f"# {shape_knob_line(suffixes)}",
             "# A knob at 0 launches its kernels as torch.compile chose to on their shape.",
             "import torch",
             "import triton",
             "import triton.language as tl",
             *(["from triton.language.extra import libdevice"] if needs_libdevice else []),
             "", "", *(["# Inductor's runtime helpers, copied from the torch that generated "
                        "this file", helpers] if helpers else []), HELPERS]
    for version in versions:
        used = [k for k in KNOB_VALUES if k in version.knobs()]
        lines += [f"# ---- shape {version.shape.label}: Inductor's kernels for it", ""]
        lines += [jit.source + "\n\n" for jit in version.jits.values()]
        lines += [f"def {version.prefix}run({params}{''.join(f', {k}' for k in used)}):",
                  *version.body(f"{tensor}.device"), "", ""]
    # other knobs the task declares (for a kernel written before) are accepted and unused
    lines.append(f"def {entry}({params}{knob_params}, **other_knobs):")
    for i, version in enumerate(versions):
        lines += [f"    if {version.condition()}:",
                  f"        s{i}_run({params}{calls[i]})", "        return"]
    lines.append(f"    raise ValueError('{entry}: no version for this call; the kernel was "
                 f"generated for the shapes {', '.join(s.label for s in shapes)}')")
    return "\n".join(lines) + "\n", knobs
