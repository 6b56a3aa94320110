"""KernelBench import of what is not a plain tensor: scalars and tuples given to forward and to
the constructor, size expressions, constructor sizes on the cpu, shrinking, edits after import,
tolerances and the argument-order hint; every problem is synthetic, in KernelBench's format."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch

from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator
from kernelswarm.experiments.authoring.task_folders import check_task
from kernelswarm.experiments.kernelbench.problem import import_problem, problem_shapes, read_problem
from kernelswarm.search import Status, TaskError, load_task
from tests.experiments.test_kernelbench import LINEAR

# Every argument kind: a tensor, a float, an int, a bool, a tuple of ints and None to forward;
# ints, a tuple of ints, a float, a bool and a string to the constructor; a parameter (Linear)
# and a buffer. Sizes as a product and a chained assignment.
EVERY_KIND = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features, window, scale, use_bias, mode):
        super().__init__()
        self.fc = nn.Linear(features, features, bias=use_bias)
        self.register_buffer("shift", torch.randn(features))
        self.window, self.scale, self.mode = window, scale, mode

    def forward(self, x, alpha, power, negate, offsets, nothing):
        y = (alpha * self.scale * self.fc(x) + self.shift) ** power
        y = y + self.window[0] * self.window[1] + offsets[0] - offsets[1]
        return -y if negate else y


batch = 4 * 2
features = width = 16


def get_inputs():
    return [torch.randn(batch, features), 0.75, 2, True, (3, 1), None]


def get_init_inputs():
    return [features, (2, 5), 0.5, True, "unused"]
'''

KERNEL = """
#include <stdint.h>
extern "C" void forward(const float* x, double alpha, int64_t power, int64_t negate,
                        int64_t offsets_0, int64_t offsets_1, int64_t features,
                        int64_t window_0, int64_t window_1, double scale, int64_t use_bias,
                        const float* w, const float* b, const float* shift, float* out,
                        const int64_t* sizes) {
    int64_t rows = sizes[0], cols = sizes[1];
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < features; ++j) {
            float acc = use_bias ? b[j] : 0.0f;
            for (int64_t k = 0; k < cols; ++k) acc += x[i * cols + k] * w[j * cols + k];
            float y = (float)(alpha * scale) * acc + shift[j], p = 1.0f;
            for (int64_t n = 0; n < power; ++n) p *= y;
            p += (float)(window_0 * window_1 + offsets_0 - offsets_1);
            out[i * features + j] = negate ? -p : p;
        }
}
"""


MATMUL = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


N = 2048 * 2
kernel_size = 3


def get_inputs():
    return [torch.randn(N, N + kernel_size), torch.randn(N + kernel_size, N)]


def get_init_inputs():
    return []
'''


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.py"
    path.write_text(text)
    return path


def test_every_argument_kind_reaches_the_kernel_typed(tmp_path, compile_cache):
    task = import_problem(_write(tmp_path, "every_kind", EVERY_KIND), tmp_path / "task",
                          cpp_source=KERNEL).task
    signature = task.module.c_signature()
    for part in ("double alpha,", "int64_t power,", "int64_t negate,", "int64_t offsets_0,",
                 "int64_t offsets_1,", "int64_t features,", "int64_t window_0,",
                 "int64_t window_1,", "double scale,", "int64_t use_bias,",
                 "setting mode = 'unused': not passed", "const float* fc_weight,",
                 "const float* shift,", "float* out0,"):
        assert part in signature
    assert task.kernels["cpp"].spec["argtypes"] == [
        "ptr", "f64", "i64", "i64", "i64", "i64", "i64", "i64", "i64", "f64", "i64",
        "ptr", "ptr", "ptr", "ptr", "ptr"]
    settings = EvaluatorSettings(cache_dir=compile_cache, seeds=1, warmup=1, min_repeats=3,
                                 max_repeats=5, timing_budget_s=0.02, flush_cache=False)
    with SandboxEvaluator(task.path, "cpp", settings) as evaluator:
        right = evaluator.evaluate(evaluator.start_candidate)
        assert right.status is Status.OK, right.message
        # a kernel that drops the float forward argument is wrong, and told about the order
        wrong = evaluator.evaluate(evaluator.start_candidate.derive(
            source=KERNEL.replace("(float)(alpha * scale)", "(float)scale")))
    assert wrong.status is Status.INCORRECT and "wrong result" in wrong.message
    assert "the entry point takes x, alpha, power, negate, offsets_0, offsets_1, features, " \
           "window_0, window_1, scale, use_bias, fc_weight, fc_bias, shift, out0, sizes" \
           in wrong.message
    assert not re.search(r"\[\d+, \d+\]", wrong.message.split("the entry point takes")[1])


def test_size_expressions_are_read_and_follow_what_they_are_computed_from(tmp_path):
    text = MATMUL.replace("kernel_size = 3", "kernel_size = 3\nM = N // 4\nh = w = 2 ** 7\n"
                                                "p, q = 5, -(3)")
    problem = read_problem(_write(tmp_path, "sizes", text))
    assert dict(problem.constants) == {"N": 4096, "kernel_size": 3, "M": 1024, "h": 128,
                                       "w": 128, "p": 5, "q": -3}
    assert problem.values({"N": 64})["M"] == 16  # computed from N: follows it
    tuning, heldout = problem_shapes(problem, {"N": 64})
    assert (tuning["cpu"][0]["N"], tuning["cuda"][0]["N"]) == (64, 4096)
    # held-out: N, which only get_inputs uses, halved to an odd size; kernel_size too
    assert heldout["cpu"][0]["N"] == 33 and heldout["cuda"][0]["N"] == 2049


def test_large_sizes_are_shrunk_for_the_cpu_and_kept_for_the_gpu(tmp_path, capsys):
    from kernelswarm.experiments.commands.cli import main

    dest = tmp_path / "matmul"
    assert main(["tasks", "import-kernelbench", str(_write(tmp_path, "mm", MATMUL)),
                 str(dest)]) == 0
    printed = capsys.readouterr().out
    assert "N 4096 -> 256" in printed
    cpu, cuda = load_task(dest, "cpu"), load_task(dest, "cuda")
    assert cpu.tuning_shapes[0]["N"] == 256 and cuda.tuning_shapes[0]["N"] == 4096
    assert cpu.tuning_shapes[0]["kernel_size"] == 3  # small constants are settings
    moved, flops = cpu.roofline(cpu.tuning_shapes[0])
    assert moved <= 4 << 20 and flops <= 2e8
    kept = tmp_path / "kept"
    assert main(["tasks", "import-kernelbench", str(tmp_path / "mm.py"), str(kept),
                 "--no-shrink", "--size", "N=100"]) == 0
    assert load_task(kept, "cpu").tuning_shapes[0]["N"] == 100


def test_a_constructor_size_is_scaled_on_the_cpu_only(tmp_path):
    task = import_problem(_write(tmp_path, "linear", LINEAR), tmp_path / "linear",
                          sizes={"in_features": 64}).task
    cpu = dict(task.tuning_shapes[0])
    cuda = dict(load_task(task.path, "cuda").tuning_shapes[0])
    assert (cpu["in_features"], cuda["in_features"]) == (64, 256)
    _, weight, _, _ = task.module.make_inputs(cpu, 0, "cpu")
    assert weight.shape == (128, 64)
    assert task.module.make_outputs(cuda, "cpu")[0].shape == (8, 128)  # traced, not run
    check_task(task.path)  # the reference runs on every cpu shape with the cpu model


def _edit_cpu_lines(task_py: Path, old: str, new: str, attributes: tuple[str, ...]) -> None:
    """Replace ``old`` on the "cpu" line of each named shape list in task.py."""
    lines, inside = task_py.read_text().splitlines(keepends=True), None
    for i, line in enumerate(lines):
        name = line.split(" = ")[0]
        inside = name if name in ("TUNING_SHAPES", "HELDOUT_SHAPES", "TRACED") else inside
        if inside in attributes and line.lstrip().startswith("'cpu'"):
            lines[i] = line.replace(old, new)
    task_py.write_text("".join(lines))


def _fresh(folder: Path, name: str) -> Path:
    """A copy of ``folder`` at a new path: loaded afresh, as a new process would load it."""
    copy = folder.parent / name
    shutil.copytree(folder, copy)
    return copy


def test_a_constructor_size_can_be_edited_in_task_py_after_import(tmp_path):
    folder = import_problem(_write(tmp_path, "linear", LINEAR), tmp_path / "linear").task.path
    _edit_cpu_lines(folder / "task.py", "'in_features': 256", "'in_features': 32",
                    ("TUNING_SHAPES",))
    task = check_task(_fresh(folder, "edited"))  # the edited shape is traced when loaded
    tuning, heldout = dict(task.tuning_shapes[0]), dict(task.heldout_shapes[0])
    assert task.module.make_inputs(tuning, 0, "cpu")[1].shape == (128, 32)
    assert task.module.make_inputs(heldout, 0, "cpu")[1].shape == (128, 256)  # not edited
    # each shape's reference runs the model built from its own sizes
    x, weight, bias, _ = task.module.make_inputs(tuning, 0, "cpu")
    (out,) = task.module.reference(*task.module.make_inputs(tuning, 0, "cpu"))
    torch.testing.assert_close(out, x @ weight.T + bias)
    assert load_task(task.path, "cuda").tuning_shapes[0]["in_features"] == 256


def test_tolerances_are_kernelbenchs_unless_stricter(tmp_path):
    path = _write(tmp_path, "linear", LINEAR)
    default = import_problem(path, tmp_path / "a").task
    assert default.tolerance("float32").atol == default.tolerance("float32").rtol == 1e-2
    strict = import_problem(path, tmp_path / "b", atol=1e-5, rtol=1e-4).task
    assert (strict.tolerance("float32").atol, strict.tolerance("bfloat16").rtol) == (1e-5, 1e-4)
    with pytest.raises(TaskError, match="--atol 0.1: must be between 0 and KernelBench's 0.01"):
        import_problem(path, tmp_path / "c", atol=0.1)


@pytest.mark.parametrize("inputs, message", [
    ('[torch.randn(batch_size, in_features), "relu"]', r"get_inputs\(\)\[1\] is 'relu'; a kernel can be given"),
    ("[torch.randn(batch_size, in_features), [2.5, 1.0]]", r"get_inputs\(\)\[1\] is \[2.5"),
])
def test_an_argument_no_kernel_can_take_is_named(tmp_path, inputs, message):
    text = LINEAR.replace("[torch.randn(batch_size, in_features)]", inputs)
    text = text.replace("def forward(self, x):", "def forward(self, x, extra):")
    with pytest.raises(TaskError, match=message):
        import_problem(_write(tmp_path, "odd", text), tmp_path / "odd")
    assert not (tmp_path / "odd").exists()


SCALED_RELU = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, slope):
        super().__init__()
        self.slope = slope

    def forward(self, x, alpha):
        return torch.where(x > 0, x, self.slope * x) * alpha


rows = 8
cols = 100


def get_inputs():
    return [torch.randn(rows, cols), 2.0]


def get_init_inputs():
    return [0.1]
'''

TRITON_KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def _kernel(x_ptr, out_ptr, n, alpha, slope, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.where(x > 0, x, slope * x) * alpha, mask=mask)


def forward(x, alpha, slope, out, BLOCK=256):
    _kernel[(triton.cdiv(x.numel(), BLOCK),)](x, out, x.numel(), alpha, slope, BLOCK=BLOCK)
'''


@pytest.mark.slow
def test_a_triton_kernel_gets_the_arguments_in_the_same_order(tmp_path, compile_cache):
    folder = import_problem(_write(tmp_path, "scaled_relu", SCALED_RELU), tmp_path / "t").task.path
    (folder / "kernel.py").write_text(TRITON_KERNEL)
    task = load_task(_fresh(folder, "with_triton"), "cpu")
    assert task.kernels["triton"].entry == "forward"
    settings = EvaluatorSettings(cache_dir=compile_cache, seeds=1, warmup=1, min_repeats=3,
                                 max_repeats=5, timing_budget_s=0.02, flush_cache=False)
    with SandboxEvaluator(task.path, "triton", settings) as evaluator:
        right = evaluator.evaluate(evaluator.start_candidate)
        assert right.status is Status.OK, right.message
        wrong = evaluator.evaluate(evaluator.start_candidate.derive(
            source=TRITON_KERNEL.replace("x.numel(), alpha, slope", "x.numel(), slope, alpha")))
    assert wrong.status is Status.INCORRECT
    assert "the entry point takes x, alpha, slope, out0, sizes" in wrong.message


TIED_SIZES = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, predictions, targets):
        return torch.clamp(1 - predictions * targets, min=0)


batch_size = 1024


def get_inputs():
    # broadcasts only while batch_size is 1024
    return [torch.rand(batch_size, 1024), torch.rand(batch_size)]


def get_init_inputs():
    return []
'''


def test_sizes_the_model_cannot_take_are_not_shrunk_nor_held_out(tmp_path):
    imported = import_problem(_write(tmp_path, "tied", TIED_SIZES), tmp_path / "tied")
    # halving batch_size breaks the broadcast: kept on the cpu, and no held-out shape
    assert imported.cpu_sizes == {}
    assert imported.task.heldout_shapes == ()
    assert imported.dropped_heldout == ("batch_size=513,dtype=float32",)
    check_task(imported.task.path)


GEMM_ADD = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        return torch.relu(self.gemm(x) + self.bias)


batch_size = 4
in_features = 8
out_features = 16


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''


def test_the_models_own_parameters_come_before_its_submodules(tmp_path):
    task = import_problem(_write(tmp_path, "gemm_add", GEMM_ADD), tmp_path / "gemm_add").task
    names = [line.split("//")[0].split()[-1].rstrip(",*") for line in
             task.module.c_signature().splitlines()[1:]]
    assert names == ["x", "in_features", "out_features", "bias", "gemm_weight", "out0",
                     "sizes)"]
    x, bias, weight, _ = task.module.make_inputs(dict(task.tuning_shapes[0]), 0, "cpu")
    assert bias.shape == (16,) and weight.shape == (16, 8)
