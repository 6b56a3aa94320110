"""FlashInfer-Trace definitions and workloads read as tasks, and a kernel written back as a
solution with its traces; synthetic definition and workload JSON in FlashInfer-Trace's schema."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch

from kernelswarm.evaluators import EvaluatorSettings
from kernelswarm.experiments.authoring.task_folders import check_task
from kernelswarm.experiments.commands.cli import main
from kernelswarm.experiments.flashinfer.export import export_solution
from kernelswarm.experiments.flashinfer.trace import import_definition
from kernelswarm.search import TaskError, load_task

REFERENCE = """import torch

def run(hidden_states, weight, eps):
    x = hidden_states.to(torch.float32)
    inv = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return (x * inv * weight.to(torch.float32)).to(hidden_states.dtype)
"""

DEFINITION = {
    "name": "rmsnorm_h64", "op_type": "rmsnorm", "description": "RMSNorm over 64 features.",
    "axes": {"batch_size": {"type": "var"}, "hidden_size": {"type": "const", "value": 64}},
    "inputs": {"hidden_states": {"shape": ["batch_size", "hidden_size"], "dtype": "bfloat16"},
               "weight": {"shape": ["hidden_size"], "dtype": "bfloat16"},
               "eps": {"shape": None, "dtype": "float32"}},
    "outputs": {"output": {"shape": ["batch_size", "hidden_size"], "dtype": "bfloat16"}},
    "reference": REFERENCE,
}

KERNEL = """
#include <math.h>
#include <stdint.h>
extern "C" void run(const float* x, const float* w, double eps, float* out, int64_t rows) {
    for (int64_t r = 0; r < rows; ++r) {
        float sum = 0.0f;
        for (int64_t i = 0; i < 64; ++i) sum += x[r * 64 + i] * x[r * 64 + i];
        float inv = 1.0f / sqrtf(sum / 64.0f + (float)eps);
        for (int64_t i = 0; i < 64; ++i) out[r * 64 + i] = x[r * 64 + i] * inv * w[i];
    }
}
"""


def _safetensors(path: Path, key: str, tensor: torch.Tensor) -> None:
    """A .safetensors file of one float32 tensor (header size, JSON header, data)."""
    data = tensor.contiguous().numpy().tobytes()
    header = json.dumps({key: {"dtype": "F32", "shape": list(tensor.shape),
                               "data_offsets": [0, len(data)]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)


def _dataset(root: Path, batches=(1, 7, 32, 128, 3)) -> tuple[Path, Path]:
    """definitions/ and workloads/ as a FlashInfer-Trace dataset lays them out; one workload's
    weight from a safetensors file, a workload of another definition in the same file."""
    definition = root / "definitions" / "rmsnorm" / "rmsnorm_h64.json"
    workloads = root / "workloads" / "rmsnorm" / "rmsnorm_h64.jsonl"
    definition.parent.mkdir(parents=True)
    workloads.parent.mkdir(parents=True)
    (root / "blob").mkdir()
    definition.write_text(json.dumps(DEFINITION))
    _safetensors(root / "blob" / "weight.safetensors", "weight", torch.linspace(0.5, 1.5, 64))
    lines = []
    for i, batch in enumerate(batches):
        weight = {"type": "safetensors", "path": "blob/weight.safetensors",
                  "tensor_key": "weight"} if i == 0 else {"type": "random"}
        lines.append({"definition": "rmsnorm_h64", "solution": None, "evaluation": None,
                      "workload": {"uuid": f"w{i}", "axes": {"batch_size": batch},
                                   "inputs": {"hidden_states": {"type": "random"},
                                              "weight": weight,
                                              "eps": {"type": "scalar", "value": 1e-6}}}})
    lines.append({"definition": "other", "workload": {"uuid": "x", "axes": {}, "inputs": {}}})
    workloads.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return definition, workloads


def test_a_definition_and_its_workloads_become_a_task(tmp_path):
    definition, workloads = _dataset(tmp_path / "data")
    imported = import_definition(definition, workloads, tmp_path / "task", cpp_source=KERNEL)
    task = check_task(imported.task.path)  # the reference runs on every cpu shape
    # cpu: the two smallest workloads, float32, and the next smallest held out
    assert [s["workload"] for s in task.tuning_shapes] == ["w0", "w4"]
    assert [s["workload"] for s in task.heldout_shapes] == ["w1"]
    assert {s["dtype"] for s in task.tuning_shapes} == {"float32"}
    cuda = load_task(task.path, "cuda")
    assert [s["workload"] for s in cuda.heldout_shapes] == ["w3"]  # every 4th
    assert [s["batch_size"] for s in cuda.tuning_shapes] == [1, 7, 32, 3]
    assert {s["dtype"] for s in cuda.tuning_shapes} == {"bfloat16"}
    x, weight, eps = task.module.make_inputs(dict(task.tuning_shapes[0]), 0, "cpu")
    assert x.shape == (1, 64) and eps.item() == pytest.approx(1e-6) and eps.dim() == 0
    assert torch.equal(weight, torch.linspace(0.5, 1.5, 64))  # read from the safetensors file
    assert task.kernels["cpp"].spec["argtypes"] == ["ptr", "ptr", "f64", "ptr", "i64"]
    signature = task.module.c_signature()
    assert "double eps," in signature and "int64_t batch_size" in signature
    assert task.tolerance("bfloat16").atol == 1e-2


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["inputs"]["weight"].update(shape=["hidden"]),
     r"inputs.weight.shape names \['hidden'\], not in 'axes'"),
    (lambda d: d["axes"].update(hidden_size={"type": "const"}), "axes.hidden_size must be"),
    (lambda d: d["outputs"]["output"].update(dtype="float64"), "outputs.output.dtype 'float64'"),
    (lambda d: d.update(reference="x = 1"), "must define a function run"),
])
def test_a_malformed_definition_names_the_field(tmp_path, edit, message):
    definition, workloads = _dataset(tmp_path / "data")
    doc = json.loads(definition.read_text())
    edit(doc)
    definition.write_text(json.dumps(doc))
    with pytest.raises(TaskError, match=message):
        import_definition(definition, workloads, tmp_path / "task")
    assert not (tmp_path / "task").exists()


def test_a_workload_without_its_axes_or_file_is_named(tmp_path):
    definition, workloads = _dataset(tmp_path / "data")
    text = workloads.read_text()
    workloads.write_text(text.replace('"batch_size": 7', '"rows": 7'))
    with pytest.raises(TaskError, match=r"rmsnorm_h64.jsonl:2: workload w1: axes.batch_size"):
        import_definition(definition, workloads, tmp_path / "task")
    workloads.write_text(text.replace("blob/weight", "blob/missing"))
    with pytest.raises(TaskError, match="safetensors file 'blob/missing.safetensors' not found"):
        import_definition(definition, workloads, tmp_path / "task")


@pytest.mark.slow
def test_the_best_kernel_is_written_back_as_a_solution_with_traces(tmp_path, compile_cache,
                                                                  capsys):
    definition, workloads = _dataset(tmp_path / "data", batches=(4, 2, 8))
    folder = tmp_path / "task"
    assert main(["tasks", "import-flashinfer", str(definition), str(workloads),
                 str(tmp_path / "stubbed")]) == 0
    assert 'extern "C" void run(' in (tmp_path / "stubbed" / "kernel.cpp").read_text()
    kernel = tmp_path / "best.cpp"  # the search's best kernel; here the starting one
    kernel.write_text(KERNEL)
    assert main(["tasks", "import-flashinfer", str(definition), str(workloads), str(folder),
                 "--cpp", str(kernel)]) == 0
    settings = EvaluatorSettings(cache_dir=compile_cache, seeds=1, warmup=1, min_repeats=3,
                                 max_repeats=5, timing_budget_s=0.02, flush_cache=False)
    out = tmp_path / "out"
    solution_file, traces_file, evaluation = export_solution(folder, kernel, out,
                                                             settings=settings)
    assert evaluation.ok, evaluation.message
    solution = json.loads(solution_file.read_text())
    assert solution["definition"] == "rmsnorm_h64"
    assert solution["spec"]["entry_point"] == "kernel.cpp::run"
    assert solution["spec"]["destination_passing_style"] is True
    assert KERNEL in solution["sources"][0]["content"]
    assert solution_file.parent == out / "solutions" / "rmsnorm" / "rmsnorm_h64"
    traces = [json.loads(line) for line in traces_file.read_text().splitlines()]
    # every cpu workload, the held-out one included, timed
    assert sorted(t["workload"]["uuid"] for t in traces) == ["w0", "w1", "w2"]
    for trace in traces:
        result = trace["evaluation"]
        assert result["status"] == "PASSED" and trace["solution"] == solution["name"]
        performance = result["performance"]
        assert performance["latency_ms"] > 0 and performance["reference_latency_ms"] > 0
        assert performance["speedup_factor"] == pytest.approx(
            performance["reference_latency_ms"] / performance["latency_ms"])
        assert result["correctness"]["max_absolute_error"] <= 1e-2
        assert Path(result["log_file"]).is_file()
    wrong = tmp_path / "wrong.cpp"
    wrong.write_text(KERNEL.replace("* inv * w[i]", "* w[i]"))
    with pytest.raises(TaskError, match="not exported, the kernel is INCORRECT"):
        export_solution(folder, wrong, tmp_path / "out2", settings=settings)
    assert not (tmp_path / "out2").exists()


def test_cpu_axes_are_set_only_where_every_input_is_random(tmp_path):
    definition, workloads = _dataset(tmp_path / "data")
    with pytest.raises(TaskError, match="the cpu workloads load tensors from safetensors"):
        import_definition(definition, workloads, tmp_path / "a", cpu_axes={"batch_size": 5})
    with pytest.raises(TaskError, match="--cpu-axis hidden_size: not a var axis"):
        import_definition(definition, workloads, tmp_path / "b", cpu_axes={"hidden_size": 8})
    lines = [json.loads(line) for line in workloads.read_text().splitlines()]
    for line in lines:
        line["workload"]["inputs"].pop("weight", None)  # an input not named is random
    workloads.write_text("".join(json.dumps(line) + "\n" for line in lines))
    task = import_definition(definition, workloads, tmp_path / "c",
                             cpu_axes={"batch_size": 5}).task
    assert {s["batch_size"] for s in task.tuning_shapes} == {5}
    assert load_task(task.path, "cuda").tuning_shapes[0]["batch_size"] == 1  # as given
    check_task(task.path)
