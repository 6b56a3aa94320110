"""A ``cpp`` starting kernel from Inductor's C++ code, one specialised version per shape.

Inductor's C++ kernels (``cpp_fused_*``) are self-contained loops over raw pointers, with every
size a literal: they are compiled for one shape. The kernel written here holds, per shape of
the task, that shape's kernels and the steps of its ``call`` (scratch buffers as static arrays,
the kernels called on the task's pointers, outputs copied where the graph returns a view), and
an entry point in the task's calling contract that picks the shape's version by the numbers
the launcher passes (sizes, settings, a sizes array): an exact match, since a version is
correct only for its own shape. A call of any other shape leaves the outputs as they are.

Inductor is asked for scalar code without threads (``cpp.simdlen = 0``, ``cpp.threads = 1``;
evaluators/inductor/inductor_start.py): its vector code needs ATen's headers and its threads OpenMP,
neither of which a ``cpp`` kernel may use; ``-O3`` vectorises the plain loops. The few helpers
the scalar code calls are defined in ``PRELUDE`` (kernelswarm's own definitions).
"""

from __future__ import annotations

import math
import re

from .inductor_code import (
    C_TYPES,
    ArgKind,
    GenerationError,
    ShapeCode,
    View,
    contiguous_strides,
    distinct,
)

# C types of the cpp contract's argument kinds (search/language_spec.py ARGUMENT_KINDS).
_PARAMETER_TYPES = {"ptr": "void*", "i64": "int64_t", "i32": "int32_t", "f32": "float",
                    "f64": "double"}

PRELUDE = """\
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>

// Helpers of Inductor's scalar C++ code, defined for a kernel without PyTorch's headers.
// An integer division by zero sets this flag in Inductor's code, which then raises; a kernel
// has nobody to raise to, so the result is left as the division gave it.
static std::atomic<int>* inductor_cpu_integer_div_error_flag = nullptr;
static inline void inductor_cpu_throw_if_integer_div_error(const std::atomic<int>&) {}

template <typename T> static inline T max_propagate_nan(T a, T b) {
    if (a != a) return a;
    if (b != b) return b;
    return a > b ? a : b;
}
template <typename T> static inline T min_propagate_nan(T a, T b) {
    if (a != a) return a;
    if (b != b) return b;
    return a < b ? a : b;
}
// argmax / argmin reductions: (index, value) of the running extreme; as torch's, NaN counts
// as the extreme and a tie keeps the first index.
template <typename T> struct IndexValue {
    int64_t index;
    T value;
};
template <typename T> static inline bool index_value_wins(T v, int64_t i, IndexValue<T> a,
                                                          bool greater) {
    bool a_nan = a.value != a.value, v_nan = v != v;
    if (a_nan || v_nan) return v_nan && (!a_nan || i < a.index);
    if (v == a.value) return i < a.index;
    return greater ? v > a.value : v < a.value;
}
template <typename T> static inline IndexValue<T> argmax_combine(IndexValue<T> a, T v, int64_t i) {
    return index_value_wins(v, i, a, true) ? IndexValue<T>{i, v} : a;
}
template <typename T> static inline IndexValue<T> argmin_combine(IndexValue<T> a, T v, int64_t i) {
    return index_value_wins(v, i, a, false) ? IndexValue<T>{i, v} : a;
}
template <typename T> static inline IndexValue<T> argmax_combine(IndexValue<T> a, IndexValue<T> b) {
    return argmax_combine(a, b.value, b.index);
}
template <typename T> static inline IndexValue<T> argmin_combine(IndexValue<T> a, IndexValue<T> b) {
    return argmin_combine(a, b.value, b.index);
}

// Long float sums: a sum per chunk of Chunk elements, the chunks' sums added, which keeps the
// rounding error near a pairwise sum's.
template <typename T, int64_t Chunk> struct CascadeSumHelper {
    explicit CascadeSumHelper(int64_t) {}
    T chunk = 0;
    T total = 0;
    int64_t count = 0;
};
template <typename T, int64_t Chunk>
static inline T cascade_sum_combine(T value, CascadeSumHelper<T, Chunk>* sum) {
    sum->chunk += value;
    if (++sum->count == Chunk) {
        sum->total += sum->chunk;
        sum->chunk = 0;
        sum->count = 0;
    }
    return sum->total + sum->chunk;
}
template <typename T, int64_t Chunk> static inline T cascade_sum_final(CascadeSumHelper<T, Chunk>* sum) {
    return sum->total + sum->chunk;
}
// Mean and variance (Welford's running update; partial results merged by Chan's formula).
template <typename T> struct Welford {
    T mean = 0;
    T m2 = 0;
    T weight = 0;
};
template <typename T> static inline Welford<T> welford_combine(Welford<T> a, Welford<T> b) {
    if (a.weight == 0) return b;
    if (b.weight == 0) return a;
    T weight = a.weight + b.weight;
    T delta = b.mean - a.mean;
    T share = b.weight / weight;
    return Welford<T>{a.mean + delta * share, a.m2 + b.m2 + delta * delta * a.weight * share,
                      weight};
}
template <typename T> static inline Welford<T> welford_combine(Welford<T> a, T value) {
    T weight = a.weight + 1;
    T delta = value - a.mean;
    T mean = a.mean + delta / weight;
    return Welford<T>{mean, a.m2 + delta * (value - mean), weight};
}
// Long reductions: a Welford per chunk of Chunk elements, merged into the total.
template <typename T, int64_t Chunk> struct WelfordHelper {
    explicit WelfordHelper(int64_t) {}
    Welford<T> chunk;
    int64_t count = 0;
};
template <typename T, int64_t Chunk>
static inline Welford<T> welford_combine(Welford<T> a, T value, WelfordHelper<T, Chunk>* part) {
    part->chunk = welford_combine(part->chunk, value);
    if (++part->count < Chunk) return a;
    Welford<T> merged = welford_combine(a, part->chunk);
    part->chunk = Welford<T>();
    part->count = 0;
    return merged;
}
template <typename T, int64_t Chunk>
static inline Welford<T> welford_combine(Welford<T> a, WelfordHelper<T, Chunk>* part) {
    Welford<T> merged = welford_combine(a, part->chunk);
    part->chunk = Welford<T>();
    part->count = 0;
    return merged;
}
namespace c10 {
template <typename To, typename From> static inline To convert(From value) {
    return static_cast<To>(value);
}
template <typename T> static inline T div_floor_integer(T a, T b) {
    T q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
template <typename T> static inline T div_floor_floating(T a, T b) {
    return std::floor(a / b);
}
}  // namespace c10
"""

_INCLUDE = re.compile(r'^\s*#include\s*[<"][^>"]*(?:torch|ATen|c10)/[^>"]*[>"]\s*$', re.M)
_ENTRY = re.compile(r'extern\s+"C"\s+void\s+kernel\s*\(')


def _kernel_source(source: str, symbol: str, label: str, name: str) -> str:
    """Inductor's kernel with PyTorch's include removed and its ``kernel`` renamed ``symbol``."""
    if len(_ENTRY.findall(source)) != 1:
        raise GenerationError(f"shape {label}: kernel {name} does not define exactly one "
                              f'extern "C" void kernel(...), the form Inductor writes')
    if re.search(r"\bat::vec::|Vectorized<", source):
        raise GenerationError(f"shape {label}: kernel {name} uses ATen's vector types, which a "
                              f"cpp kernel cannot include")
    return _ENTRY.sub(f"static void {symbol}(", _INCLUDE.sub("", source), count=1)


class _Route:
    """The C of one shape: its kernels, scratch buffers and the body of its ``run``."""

    def __init__(self, index: int, shape: ShapeCode, argtypes: list[str]) -> None:
        self.prefix, self.shape, self.argtypes = f"s{index}_", shape, argtypes
        code = shape.code
        self.roots: dict[str, tuple[str, str]] = {}  # storage -> (C expression, dtype)
        for k, view in enumerate(code.inputs):
            task_input = shape.graph_inputs[k]
            position = shape.position(ArgKind.INPUT, task_input)
            self.roots[view.root] = (f"a{position}", shape.input_dtypes[task_input])
        self.copies: list[tuple[int, View]] = []
        for j, view in enumerate(code.returns):
            if j >= len(shape.outputs):
                raise GenerationError(f"shape {shape.label}: the graph returns more tensors "
                                      f"({len(code.returns)}) than make_outputs makes")
            if not self._writes_in_place(j, view):
                self.copies.append((j, view))
        if len(code.returns) != len(shape.outputs):
            raise GenerationError(f"shape {shape.label}: the graph returns {len(code.returns)} "
                                  f"tensors, make_outputs makes {len(shape.outputs)}")
        self.statics = []
        for name, alloc in code.allocs.items():
            if name not in self.roots:
                symbol = f"{self.prefix}{name}"
                ctype = _c_type(alloc.dtype, shape.label)
                self.statics.append(f"alignas(64) static {ctype} {symbol}[{max(alloc.numel, 1)}];")
                self.roots[name] = (symbol, alloc.dtype)

    def _writes_in_place(self, j: int, view: View) -> bool:
        """Whether output ``j`` can be the storage the graph returns (no copy): a whole,
        contiguous buffer of the output's sizes and dtype."""
        alloc = self.shape.code.allocs.get(view.root)
        size, dtype = self.shape.outputs[j]
        if alloc is None or view.root in self.roots or view.offset or alloc.dtype != dtype:
            return False
        whole = view.size == alloc.size and view.stride == alloc.stride
        if not whole or alloc.stride != contiguous_strides(alloc.size) \
                or alloc.numel != math.prod(size) or math.prod(alloc.size) != math.prod(size):
            return False
        self.roots[view.root] = (f"a{self.shape.position(ArgKind.OUTPUT, j)}", dtype)
        return True

    def pointer(self, view: View, cast: str) -> str:
        expression, dtype = self.roots[view.root]
        typed = f"(({_c_type(dtype, self.shape.label)}*)({expression}))"
        return f"({cast})({typed} + {view.offset})" if view.offset else f"({cast}){typed}"

    def body(self) -> list[str]:
        code, lines = self.shape.code, []
        for launch in code.launches:
            kernel = code.kernels[launch.kernel]
            if len(kernel.arg_types) != len(launch.args):
                raise GenerationError(f"shape {self.shape.label}: {launch.kernel} takes "
                                      f"{len(kernel.arg_types)} arguments, call() passes "
                                      f"{len(launch.args)}")
            args = [self.pointer(a, t) if isinstance(a, View) else repr(a)
                    for a, t in zip(launch.args, kernel.arg_types, strict=True)]
            lines.append(f"    {self.prefix}{launch.kernel}({', '.join(args)});")
        for j, view in self.copies:
            lines += self._copy(j, view)
        return lines

    def _copy(self, j: int, view: View) -> list[str]:
        """A loop nest copying the returned view into output ``j`` (row-major)."""
        size, dtype = self.shape.outputs[j]
        if math.prod(view.size) != math.prod(size):
            raise GenerationError(f"shape {self.shape.label}: output {j} has {math.prod(size)} "
                                  f"elements, the graph returns {math.prod(view.size)}")
        destination = _c_type(dtype, self.shape.label)
        source = self.pointer(view, f"const {_c_type(self.roots[view.root][1], '')}*")
        target = f"(({destination}*)(a{self.shape.position(ArgKind.OUTPUT, j)}))"
        loops = [f"for (int64_t i{d} = 0; i{d} < {n}; ++i{d})" for d, n in enumerate(view.size)]
        to = " + ".join(f"i{d} * {s}" for d, s in enumerate(contiguous_strides(view.size))) or "0"
        at = " + ".join(f"i{d} * {s}" for d, s in enumerate(view.stride)) or "0"
        return [f"    {' '.join(loops)}",
                f"        {target}[{to}] = static_cast<{destination}>(({source})[{at}]);"]

    def condition(self) -> str:
        parts = []
        for i, element, value in self.shape.key():
            argument = self.shape.arguments[i]
            if argument.kind is ArgKind.ARRAY:
                parts.append(f"((const {argument.ctype}*)a{i})[{element}] == {value!r}")
            elif self.argtypes[i] == "f32":
                parts.append(f"a{i} == (float){value!r}")
            else:
                parts.append(f"a{i} == {value!r}")
        return " && ".join(parts) or "true"

    def source(self, parameters: str) -> str:
        kernels = [_kernel_source(self.shape.code.kernels[name].source,
                                  f"{self.prefix}{name}", self.shape.label, name)
                   for name in self.shape.code.kernels]
        return "\n".join([f"// ---- shape {self.shape.label}: Inductor's code for it",
                          *kernels, *self.statics,
                          f"static void {self.prefix}run({parameters}) {{", *self.body(), "}",
                          ""])


def _c_type(dtype: str, label: str) -> str:
    if dtype not in C_TYPES:
        raise GenerationError(f"shape {label}: dtype {dtype} has no plain C type (16-bit floats "
                              f"need ATen's Half/BFloat16); generate on float32 shapes")
    return C_TYPES[dtype]


def cpp_start(entry: str, argtypes: list[str], shapes: list[ShapeCode]) -> str:
    """The ``cpp`` kernel ``entry`` (the task's ``argtypes``) with one version per shape."""
    if not shapes:
        raise GenerationError("no shape to generate code for")
    for shape in shapes:
        if len(shape.arguments) != len(argtypes):
            raise GenerationError(f"shape {shape.label}: the launcher passes "
                                  f"{len(shape.arguments)} arguments, KERNELS['cpp']['argtypes'] "
                                  f"lists {len(argtypes)}")
        for launch in shape.code.launches:
            if shape.code.kernels[launch.kernel].language != "cpp":
                raise GenerationError(f"shape {shape.label}: {launch.kernel} is not C++ code")
    shapes = distinct(shapes)
    parameters = ", ".join(f"{_PARAMETER_TYPES[kind]} a{i}" for i, kind in enumerate(argtypes))
    call = ", ".join(f"a{i}" for i in range(len(argtypes)))
    routes = [_Route(i, shape, argtypes) for i, shape in enumerate(shapes)]
    lines = [f"// Generated by kernelswarm from torch.compile (Inductor's C++ code) for the "
             f"shapes {', '.join(s.label for s in shapes)};",
             "// another shape is not computed (the outputs are left as they are).",
             PRELUDE]
    lines += [route.source(parameters) for route in routes]
    lines.append(f'extern "C" void {entry}({parameters}) {{')
    for i, route in enumerate(routes):
        lines.append(f"    if ({route.condition()}) {{ s{i}_run({call}); return; }}")
    lines.append("}")
    return "\n".join(lines) + "\n"
