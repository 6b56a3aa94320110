"""Inductor's output code, read as data: its kernels and the steps of its ``call``.

``torch.compile`` (Inductor) writes one Python module per compiled graph: kernels compiled by
``async_compile.cpp_pybinding`` (C++, CPU) or ``async_compile.triton`` (Triton), and a ``call``
function that allocates buffers, launches the kernels on them and returns the outputs. This
module parses that text (it imports nothing of torch) into ``OutputCode``: the kernels' sources
and a list of steps, so that a starting kernel can be written from them in a task's calling
contract (evaluators/inductor/inductor_cpp.py, inductor_triton.py).

Only what a fully generated graph contains is accepted: buffer allocations, views of buffers
(``reinterpret_tensor``), buffer reuse, kernel launches and the returned tensors. A call of a
library kernel (``extern_kernels.mm``), an ATen fallback (``aten.sort``) or anything else
raises ``GenerationError`` naming it: Inductor did not generate code for that part.
"""

from __future__ import annotations

import ast
import enum
import math
from dataclasses import dataclass

# Inductor's dtype names (torch.<name>) -> C type of the cpp kernels' pointers.
C_TYPES = {"float32": "float", "float64": "double", "int64": "int64_t", "int32": "int32_t",
           "int16": "int16_t", "int8": "int8_t", "uint8": "uint8_t", "bool": "bool"}

_SKIPPED_CALLS = ("assert_size_stride", "assert_alignment", "get_raw_stream",
                  "torch.cuda.set_device", "args.clear", "torch._C._set_cpu_allow_fp16_reduced")
_ALLOCATORS = ("empty_strided_cpu", "empty_strided_cuda", "empty_strided")


class GenerationError(Exception):
    """A starting kernel that cannot be generated; the message says why, in the user's terms."""


class LibraryCall(GenerationError):
    """The graph hands an op to a vendor library (``extern_kernels.mm``): Inductor wrote no code
    for it in this mode (with Triton as its GEMM backend it may write a template)."""


@dataclass(frozen=True)
class Kernel:
    """One generated kernel: its name in the module, language, source and (cpp) argument types."""

    name: str
    language: str  # "cpp" or "triton"
    source: str
    arg_types: tuple[str, ...] = ()  # cpp: the C types of its parameters


@dataclass(frozen=True)
class View:
    """A tensor of ``call``: ``offset``, sizes and strides (elements) over the storage ``root``
    (a graph input ``argN_M`` / ``primalsN`` or an allocated buffer)."""

    root: str
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int = 0


@dataclass(frozen=True)
class Alloc:
    """``name = empty_strided_*(size, stride, dtype)``."""

    name: str
    size: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str

    @property
    def numel(self) -> int:
        """Elements the storage must hold for its sizes and strides."""
        if any(s == 0 for s in self.size):
            return 0
        return 1 + sum((n - 1) * s for n, s in zip(self.size, self.stride, strict=True))


@dataclass(frozen=True)
class Launch:
    """A kernel launched on ``args``: views of tensors, or numbers (sizes Inductor passes)."""

    kernel: str
    args: tuple[View | int | float, ...]


@dataclass(frozen=True)
class OutputCode:
    """One compiled graph: its inputs (names, sizes, strides), kernels, allocations, launches
    (in order) and returned views."""

    inputs: tuple[View, ...]
    kernels: dict[str, Kernel]
    allocs: dict[str, Alloc]
    launches: tuple[Launch, ...]
    returns: tuple[View, ...]


def contiguous_strides(size: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides of ``size`` (a dimension of 1 keeps the stride its neighbours give)."""
    strides, step = [], 1
    for n in reversed(size):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _text(node: ast.AST) -> str:
    return ast.unparse(node)


def _ints(node: ast.AST, where: str) -> tuple[int, ...]:
    try:
        value = ast.literal_eval(node)
    except ValueError:
        raise GenerationError(f"{where}: the sizes {_text(node)} are symbolic (a dynamic "
                              f"shape); a generated start needs every size known") from None
    if not isinstance(value, tuple) or not all(isinstance(v, int) for v in value):
        raise GenerationError(f"{where}: expected a tuple of integers, got {_text(node)}")
    return value


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return _text(node)


def _kernel(name: str, call: ast.Call) -> Kernel | None:
    how = _dotted(call.func)
    if how in ("async_compile.cpp_pybinding", "async_compile.cpp"):
        types: tuple[str, ...] = ()
        if how.endswith("cpp_pybinding"):
            types = tuple(ast.literal_eval(call.args[0]))
        source = ast.literal_eval(call.args[-1])
        return Kernel(name, "cpp", source, types)
    if how == "async_compile.triton":
        return Kernel(name, "triton", ast.literal_eval(call.args[1]))
    if how.startswith("async_compile."):
        raise GenerationError(f"kernel {name} is compiled by {how}, a kind of kernel the "
                              f"generated start does not take (only C++ and Triton)")
    return None


class _CallReader:
    """Walks ``call``'s statements into allocations, launches and the returned views."""

    def __init__(self, kernels: dict[str, Kernel]) -> None:
        self.kernels = kernels
        self.views: dict[str, View] = {}
        self.inputs: list[View] = []
        self.allocs: dict[str, Alloc] = {}
        self.launches: list[Launch] = []
        self.returns: tuple[View, ...] | None = None

    def view(self, node: ast.AST, where: str) -> View:
        if isinstance(node, ast.Name):
            if node.id not in self.views:
                raise GenerationError(f"{where}: {node.id} is not a tensor of the graph")
            return self.views[node.id]
        if isinstance(node, ast.Call) and _dotted(node.func) == "reinterpret_tensor":
            base = self.view(node.args[0], where)
            offset = int(ast.literal_eval(node.args[3])) if len(node.args) > 3 else 0
            return View(base.root, _ints(node.args[1], where), _ints(node.args[2], where),
                        base.offset + offset)
        raise GenerationError(f"{where}: {_text(node)} is not a buffer or a view of one")

    def argument(self, node: ast.AST, where: str) -> View | int | float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.Call) and _dotted(node.func) in ("c_long", "c_int", "c_float",
                                                                 "c_double"):
            return ast.literal_eval(node.args[0])
        return self.view(node, where)

    def statement(self, node: ast.stmt) -> None:
        where = f"line {node.lineno} of the compiled module ({_text(node)[:120]})"
        if isinstance(node, ast.With):  # the CUDA device guard: its body is the graph
            for inner in node.body:
                self.statement(inner)
            return
        if isinstance(node, (ast.Delete, ast.Pass)):
            return
        if isinstance(node, ast.Return):
            value = node.value
            items = value.elts if isinstance(value, (ast.Tuple, ast.List)) else [value]
            self.returns = tuple(self.view(item, where) for item in items if item is not None)
            return
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            self.launch(node.value, where)
            return
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            return  # a string: a comment
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            self.assign(node.targets[0], node.value, where)
            return
        raise GenerationError(f"{where}: a statement the generated start cannot translate")

    def assign(self, target: ast.expr, value: ast.expr, where: str) -> None:
        if isinstance(target, ast.Tuple) and _text(value) == "args":
            self.inputs = [View(e.id, (), ()) for e in target.elts if isinstance(e, ast.Name)]
            self.views.update({v.root: v for v in self.inputs})
            return
        if not isinstance(target, ast.Name):
            raise GenerationError(f"{where}: an assignment the generated start cannot translate")
        if isinstance(value, ast.Constant) and value.value is None:
            return
        if isinstance(value, ast.Call) and _dotted(value.func) in ("get_raw_stream",):
            return
        if isinstance(value, ast.Call) and _dotted(value.func).endswith((".size", ".stride")):
            raise GenerationError(f"{where}: the compiled code reads a size at run time (a "
                                  f"dynamic shape); a generated start needs every size known")
        if isinstance(value, ast.Call) and _dotted(value.func) in _ALLOCATORS:
            size, stride = _ints(value.args[0], where), _ints(value.args[1], where)
            dtype = _dotted(value.args[2]).removeprefix("torch.")
            self.allocs[target.id] = Alloc(target.id, size, stride, dtype)
            self.views[target.id] = View(target.id, size, stride)
            return
        if isinstance(value, (ast.Name, ast.Call)):
            if isinstance(value, ast.Call) and _dotted(value.func) != "reinterpret_tensor":
                self.launch(value, where)  # raises: a library call whose result is a tensor
            self.views[target.id] = self.view(value, where)
            return
        raise GenerationError(f"{where}: an assignment the generated start cannot translate")

    def launch(self, call: ast.Call, where: str) -> None:
        name = _dotted(call.func)
        if name in _SKIPPED_CALLS or name.endswith(".clear"):
            return
        kernel = name.removesuffix(".run")
        if kernel in self.kernels:
            self.launches.append(Launch(kernel, tuple(self.argument(a, where)
                                                      for a in call.args)))
            return
        if name.startswith("extern_kernels."):
            raise LibraryCall(
                f"the graph calls the library kernel {name} ({where}): Inductor hands this op "
                f"(a matmul, convolution or the like) to a vendor library and generates no "
                f"code for it, so there is nothing to start from")
        if name.startswith(("aten.", "torch.ops.")):
            raise GenerationError(
                f"Inductor falls back on the ATen op {name} ({where}): it has no code "
                f"generation for it, so part of the graph would run in PyTorch, which a kernel "
                f"may not call")
        raise GenerationError(f"{where}: a call of {name}, which is not one of the compiled "
                              f"kernels; the generated start cannot translate it")


def _call_function(tree: ast.Module) -> ast.FunctionDef:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "call":
            return node
    raise GenerationError("the compiled module has no call() function: not Inductor's output "
                          "code")


def parse_output_code(code: str) -> OutputCode:
    """Read one of Inductor's output modules; ``GenerationError`` names what is not generated."""
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        raise GenerationError(f"the compiled module is not Python: {exc}") from None
    kernels: dict[str, Kernel] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Call):
            kernel = _kernel(node.targets[0].id, node.value)
            if kernel is not None:
                kernels[kernel.name] = kernel
    reader = _CallReader(kernels)
    for statement in _call_function(tree).body:
        reader.statement(statement)
    if reader.returns is None:
        raise GenerationError("the compiled call() returns nothing")
    sizes = _input_sizes(_call_function(tree))
    inputs = tuple(View(v.root, *sizes.get(v.root, ((), ()))) for v in reader.inputs)
    return OutputCode(inputs, kernels, reader.allocs, tuple(reader.launches), reader.returns)


def _input_sizes(function: ast.FunctionDef) -> dict[str, tuple[tuple[int, ...], ...]]:
    """Each graph input's (sizes, strides), from call()'s ``assert_size_stride`` lines."""
    sizes = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and _dotted(node.func) == "assert_size_stride" \
                and isinstance(node.args[0], ast.Name):
            where = f"assert_size_stride of {node.args[0].id}"
            sizes[node.args[0].id] = (_ints(node.args[1], where), _ints(node.args[2], where))
    return sizes


def storage_numel(view: View) -> int:
    """Elements from the view's first to its last, plus one (0 for an empty view)."""
    if math.prod(view.size) == 0:
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(view.size, view.stride, strict=True))


class ArgKind(enum.Enum):
    """What one argument of the task's launcher call is."""

    INPUT = "input"  # a pointer to make_inputs()[index]
    OUTPUT = "output"  # a pointer to make_outputs()[index]
    SCALAR = "scalar"  # a number (a size, a setting)
    ARRAY = "array"  # a pointer to an array of numbers the launcher built (sizes)


@dataclass(frozen=True)
class Argument:
    """One argument of the launcher's call of the kernel, as seen on one shape."""

    kind: ArgKind
    index: int = -1  # INPUT / OUTPUT: which tensor
    value: tuple[int | float, ...] = ()  # SCALAR: (the value,); ARRAY: its elements
    ctype: str = ""  # ARRAY: the C type of its elements


@dataclass(frozen=True)
class ShapeCode:
    """One shape's compiled graph, and how the task's launcher calls the kernel on it."""

    label: str
    code: OutputCode
    graph_inputs: tuple[int, ...]  # per graph input: its index in make_inputs()
    arguments: tuple[Argument, ...]  # the launcher's call, in order
    input_dtypes: tuple[str, ...]  # per make_inputs() tensor
    outputs: tuple[tuple[tuple[int, ...], str], ...]  # per make_outputs() tensor: sizes, dtype
    input_sizes: tuple[tuple[int, ...], ...] = ()  # per make_inputs() tensor
    # Per Triton kernel: the launch settings Inductor's runtime chose for it on this shape
    # (after its autotuning): block sizes, num_warps, num_stages. Empty where none was recorded
    # (code for the CPU, or code that was not run).
    launch_configs: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] = ()

    def launch_config(self, kernel: str) -> dict[str, int]:
        """The launch settings Inductor chose for ``kernel`` on this shape ({} if unknown)."""
        return dict(dict(self.launch_configs).get(kernel, ()))

    def position(self, kind: ArgKind, index: int) -> int:
        """The call's argument that is tensor ``index`` of ``kind``; GenerationError if none."""
        for i, argument in enumerate(self.arguments):
            if argument.kind is kind and argument.index == index:
                return i
        raise GenerationError(f"shape {self.label}: the launcher does not pass {kind.value} "
                              f"{index} to the kernel, which the compiled graph needs")

    def key(self) -> tuple[tuple[int, int, int | float], ...]:
        """(argument, element, value) of every number the launcher passes: what tells this
        shape's call from another's inside a C kernel."""
        return tuple((i, j, v) for i, a in enumerate(self.arguments)
                     if a.kind in (ArgKind.SCALAR, ArgKind.ARRAY) for j, v in enumerate(a.value))

    def sizes_of(self, argument: Argument) -> tuple[int, ...]:
        """The sizes of the tensor ``argument`` passes."""
        if argument.kind is ArgKind.INPUT:
            return self.input_sizes[argument.index]
        return self.outputs[argument.index][0]

    def dtype_of(self, argument: Argument) -> str:
        """The dtype of the tensor ``argument`` passes (``float32``, ``bfloat16``, ...)."""
        if argument.kind is ArgKind.INPUT:
            return self.input_dtypes[argument.index]
        return self.outputs[argument.index][1]


def distinct(shapes: list[ShapeCode], tensors: bool = False) -> list[ShapeCode]:
    """``shapes`` less those that reach the kernel exactly as an earlier one does (the same
    numbers and, with ``tensors``, tensors of the same sizes and dtypes) with the same compiled code: one
    version serves both. ``GenerationError`` when such shapes have different code (sizes the
    kernel is not given differ, e.g. a model built from a constant): it could not tell which
    shape's code to run."""
    seen: dict[tuple, ShapeCode] = {}
    kept = []
    for shape in shapes:
        key: tuple = shape.key()
        if tensors:  # tensors of another size or dtype tell the shapes apart
            key += tuple((shape.sizes_of(a), shape.dtype_of(a)) for a in shape.arguments
                         if a.kind in (ArgKind.INPUT, ArgKind.OUTPUT))
        first = seen.get(key)
        if first is None:
            seen[key] = shape
            kept.append(shape)
        elif (first.code, first.graph_inputs, first.arguments) != (shape.code, shape.graph_inputs,
                                                                   shape.arguments):
            raise GenerationError(f"shapes {first.label} and {shape.label} reach the kernel "
                                  f"with the same arguments (no size or setting differs) but "
                                  f"compile to different code, so a kernel specialised per "
                                  f"shape cannot tell them apart")
    return kept
