"""KernelBench problems imported as task folders: the reference is the problem's model, a right
cpp kernel passes the real evaluator and a wrong one does not; malformed problems are named."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator
from kernelswarm.experiments.commands.cli import main
from kernelswarm.experiments.kernelbench.problem import import_problem, problem_shapes, read_problem
from kernelswarm.search import Status, TaskError

# Problem files in KernelBench's format (a Model, get_inputs, get_init_inputs, size constants).
RELU = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


batch_size = 16
dim = 4096


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

ROW_SOFTMAX = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over each row of a [batch, features] input."""

    def forward(self, x):
        return torch.softmax(x, dim=-1)


batch_size = 8
features = 1000


def get_inputs():
    return [3.0 * torch.randn(batch_size, features)]


def get_init_inputs():
    return []
'''

LINEAR = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.fc(x)


batch_size = 8
in_features = 256
out_features = 128


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''

# (problem, right kernel, wrong kernel); sizes come from the arguments, never constants.
PROBLEMS = {
    "relu": (RELU, """
#include <stdint.h>
extern "C" void forward(const float* x, float* out, const int64_t* sizes) {
    for (int64_t i = 0; i < sizes[0] * sizes[1]; ++i) out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}""", """
#include <stdint.h>
extern "C" void forward(const float* x, float* out, const int64_t* sizes) {
    for (int64_t i = 0; i < sizes[0] * sizes[1]; ++i) out[i] = x[i] > 0.0f ? x[i] : 0.01f * x[i];
}"""),
    "row_softmax": (ROW_SOFTMAX, """
#include <math.h>
#include <stdint.h>
extern "C" void forward(const float* x, float* out, const int64_t* sizes) {
    int64_t rows = sizes[0], cols = sizes[1];
    for (int64_t r = 0; r < rows; ++r) {
        float m = -INFINITY, sum = 0.0f;
        for (int64_t i = 0; i < cols; ++i) m = fmaxf(m, x[r * cols + i]);
        for (int64_t i = 0; i < cols; ++i) sum += out[r * cols + i] = expf(x[r * cols + i] - m);
        for (int64_t i = 0; i < cols; ++i) out[r * cols + i] /= sum;
    }
}""", """
#include <math.h>
#include <stdint.h>
extern "C" void forward(const float* x, float* out, const int64_t* sizes) {
    for (int64_t i = 0; i < sizes[0] * sizes[1]; ++i) out[i] = expf(x[i]);
}"""),
    "linear": (LINEAR, """
#include <stdint.h>
extern "C" void forward(const float* x, int64_t in, int64_t out_features, const float* w,
                        const float* b, float* out, const int64_t* sizes) {
    int64_t batch = sizes[0];
    for (int64_t i = 0; i < batch; ++i)
        for (int64_t j = 0; j < out_features; ++j) {
            float acc = b[j];
            for (int64_t k = 0; k < in; ++k) acc += x[i * in + k] * w[j * in + k];
            out[i * out_features + j] = acc;
        }
}""", """
#include <stdint.h>
extern "C" void forward(const float* x, int64_t in, int64_t out_features, const float* w,
                        const float* b, float* out, const int64_t* sizes) {
    int64_t batch = sizes[0];
    for (int64_t i = 0; i < batch; ++i)
        for (int64_t j = 0; j < out_features; ++j) {
            float acc = 0.0f;
            for (int64_t k = 0; k < in; ++k) acc += x[i * in + k] * w[j * in + k];
            out[i * out_features + j] = acc;
        }
}"""),
}


def _problem_file(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.py"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory, compile_cache: Path
             ) -> Iterator[dict[str, SandboxEvaluator]]:
    """Each problem imported with its right kernel as the starting kernel, and an evaluator."""
    root = tmp_path_factory.mktemp("kernelbench")
    settings = EvaluatorSettings(cache_dir=compile_cache, seeds=2, warmup=1, min_repeats=3,
                                 max_repeats=10, timing_budget_s=0.02, flush_cache=False)
    made = {}
    for name, (text, right, _) in PROBLEMS.items():
        task = import_problem(_problem_file(root, name, text), root / "tasks" / name,
                              cpp_source=right).task
        made[name] = SandboxEvaluator(task.path, "cpp", settings)
    yield made
    for evaluator in made.values():
        evaluator.close()


@pytest.mark.parametrize("name", PROBLEMS)
def test_a_right_kernel_passes_and_a_wrong_one_does_not(imported, name):
    evaluator = imported[name]
    right = evaluator.evaluate(evaluator.start_candidate)
    assert right.status is Status.OK, right.message
    assert "1 held-out shapes" in right.message  # the odd-sized shape ran too
    wrong = evaluator.evaluate(evaluator.start_candidate.derive(source=PROBLEMS[name][2]))
    assert wrong.status is Status.INCORRECT and "wrong result" in wrong.message


def test_parameters_are_inputs_and_the_reference_is_the_models_forward(imported):
    module = imported["linear"].task.module
    shape = dict(imported["linear"].task.tuning_shapes[0])
    x, weight, bias, fixed = module.make_inputs(shape, 3, "cpu")
    assert weight.shape == (128, 256) and bias.shape == (128,)
    assert fixed.tolist() == [256, 128]  # the sizes the reference's model is built from
    (out,) = module.reference(x, weight, bias, fixed)
    torch.testing.assert_close(out, x @ weight.T + bias)
    other = module.make_inputs(shape, 4, "cpu")
    assert not torch.equal(other[1], weight)  # each seed draws its own parameters
    assert [o.shape for o in module.make_outputs(shape, "cpu")] == [(8, 128)]


def test_the_compile_baseline_compiles_the_models_forward_as_one_graph(imported):
    """torch.compile is given the model's forward with the model and scalars fixed, not the
    reference's unpacking of its inputs (the sizes tensor, scalars as tensors), whose
    .tolist() and .item() would break the graph: compile is timed at its best."""
    from kernelswarm.evaluators.baselines.baseline_worker import _compile_target, compile_reference

    task = imported["linear"].task
    shape = dict(task.tuning_shapes[0])
    copies = [tuple(task.module.make_inputs(shape, seed, "cpu")) for seed in (0, 1)]
    body, args = _compile_target(task, copies)
    assert [len(a) for a in args] == [3, 3]  # x, weight, bias: not the sizes tensor
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    try:
        compiled = compile_reference(body, "default", backend=record)
        for copy, arguments in zip(copies, args, strict=True):
            (got,) = compiled(*arguments)
            torch.testing.assert_close(got, task.module.reference(*copy)[0])
    finally:
        torch._dynamo.reset()
    assert len(graphs) == 1  # one graph, reused by the second copy: no break, no recompile


def test_inputs_are_drawn_on_the_device_asked_for(tmp_path):
    """KernelBench's own sizes (19_ReLU: a 4096 x 393216 input, 6.4 GB) are drawn where they are
    used: get_inputs() runs with the evaluation's device as its default. On the meta device a
    draw costs nothing; one drawn on the CPU and copied over would take 6.4 GB and seconds."""
    import time

    big = RELU.replace("batch_size = 16", "batch_size = 4096").replace("dim = 4096",
                                                                       "dim = 393216")
    task = import_problem(_problem_file(tmp_path, "relu", big), tmp_path / "task").task
    shape = {"batch_size": 4096, "dim": 393216, "dtype": "float32"}
    began = time.perf_counter()
    (x, fixed) = task.module.make_inputs(shape, 0, "meta")
    assert x.device.type == "meta" and tuple(x.shape) == (4096, 393216)
    assert time.perf_counter() - began < 2.0
    small = dict(task.tuning_shapes[0])  # the cpu sizes: the same draw on the same device
    first, again = (task.module.make_inputs(small, 3, "cpu")[0] for _ in range(2))
    assert torch.equal(first, again)


def test_shapes_come_from_the_problems_constants(tmp_path):
    problem = read_problem(_problem_file(tmp_path, "linear", LINEAR))
    assert dict(problem.constants) == {"batch_size": 8, "in_features": 256, "out_features": 128}
    assert problem.fixed == {"in_features", "out_features"} and problem.varied == ("batch_size",)
    tuning, heldout = problem_shapes(problem, {"batch_size": 2})
    assert tuning["cpu"][0]["batch_size"] == 2 and tuning["cuda"][0]["batch_size"] == 8
    assert heldout["cuda"][0] == {**tuning["cuda"][0], "batch_size": 5}  # an odd half
    # a size the model is built from changes the cpu model only, and no held-out shape halves it
    tuning, heldout = problem_shapes(problem, {"in_features": 64})
    assert (tuning["cpu"][0]["in_features"], tuning["cuda"][0]["in_features"]) == (64, 256)
    assert heldout["cpu"][0]["in_features"] == 64
    with pytest.raises(TaskError, match="has no integer constant 'batch'"):
        problem_shapes(problem, {"batch": 2})


def test_without_a_kernel_the_import_writes_a_stub_with_the_signature(tmp_path, capsys):
    problem = _problem_file(tmp_path, "linear", LINEAR)
    dest = tmp_path / "linear_task"
    assert main(["tasks", "import-kernelbench", str(problem), str(dest),
                 "--size", "batch_size=4"]) == 0
    stub = (dest / "kernel.cpp").read_text()
    assert 'extern "C" void forward(' in stub
    for line in ("const float* x, // input x: sizes[0..1] = [4, 256]",
                 "int64_t in_features, // setting in_features: int, 256 here",
                 "int64_t out_features, // setting out_features: int, 128 here",
                 "const float* fc_weight, // parameter fc_weight: sizes[2..3] = [128, 256]",
                 "const float* fc_bias, // parameter fc_bias: sizes[4] = [128]",
                 "float* out0, // output out0: sizes[5..6] = [4, 128]",
                 "const int64_t* sizes) {"):
        assert line in [" ".join(s.split()) for s in stub.splitlines()]  # aligned comments
    assert (dest / "problem.py").read_text() == LINEAR
    assert "fc_weight" in capsys.readouterr().out


@pytest.mark.parametrize("text, message", [
    (RELU.replace("def get_inputs", "def inputs"), "it does not define get_inputs"),
    (RELU.replace("return torch.relu(x)", "return {\"y\": torch.relu(x)}"),
     "Model.forward must return a tensor"),
    ("def broken(:\n", "not valid Python"),
])
def test_a_bad_problem_is_named_and_leaves_nothing_behind(tmp_path, text, message):
    dest = tmp_path / "tasks" / "bad"
    with pytest.raises(TaskError, match=message) as raised:
        import_problem(_problem_file(tmp_path, "bad", text), dest)
    assert ".bad-" not in str(raised.value)  # named where the folder would be, not staged
    assert not dest.exists()
    assert not (tmp_path / "tasks").exists() or not any((tmp_path / "tasks").iterdir())


def test_an_existing_folder_is_not_overwritten(tmp_path):
    dest = tmp_path / "taken"
    dest.mkdir()
    (dest / "notes.txt").write_text("mine")
    with pytest.raises(TaskError, match="already exists"):
        import_problem(_problem_file(tmp_path, "relu", RELU), dest)
    assert (dest / "notes.txt").read_text() == "mine"
