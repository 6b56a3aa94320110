"""Loading task folders: the built-in task, and malformed folders named precisely."""

from __future__ import annotations

import pytest

from kernelswarm.search import Shape, TaskError, load_task
from tests.conftest import SILU_TASK


def test_builtin_task_loads_with_its_shapes_and_starting_kernel():
    task = load_task(SILU_TASK)
    assert task.name == "silu_and_mul"
    assert len(task.tuning_shapes) >= 3 and task.heldout_shapes
    start = task.starting_candidate("cpp")
    assert "extern \"C\"" in start.source and start.entry == "silu_and_mul"
    assert start.spec_dict["argtypes"] == ["ptr", "ptr", "i64", "i64"]


def test_roofline_matches_a_hand_computed_value():
    task = load_task(SILU_TASK)
    moved, flops = task.roofline(Shape.of({"tokens": 16, "d": 4096, "dtype": "float32"}))
    assert moved == 3 * 16 * 4096 * 4  # two input halves read, one output written, 4 bytes each
    assert flops == 4 * 16 * 4096


def test_shape_is_an_ordered_hashable_mapping():
    a = Shape.of({"tokens": 1, "d": 8, "dtype": "float32"})
    b = Shape.of({"dtype": "float32", "d": 8, "tokens": 1})
    assert a == b and hash(a) == hash(b)
    assert a.label == "d=8,dtype=float32,tokens=1"
    assert dict(a)["tokens"] == 1


def test_a_language_the_task_lacks_is_named(silu_task_copy):
    task_py = silu_task_copy / "task.py"
    task_py.write_text(task_py.read_text() + '\nKERNELS = {"cpp": KERNELS["cpp"]}\n')
    task = load_task(silu_task_copy)
    with pytest.raises(TaskError, match="no starting kernel for language 'cuda'; it has: cpp"):
        task.kernel("cuda")


@pytest.mark.parametrize("edit, message", [
    (lambda s: s.replace("def make_outputs", "def _gone"), "missing make_outputs"),
    (lambda s: s.replace('"source": "silu_and_mul.cpp"', '"source": "nope.cpp"'), "'nope.cpp'"),
    (lambda s: s.replace("def launch_cpp", "def _launch"), "no function launch_cpp"),
    (lambda s: s.replace('"cpp": {', '"rust": {'), "unknown language"),
    (lambda s: s.replace('"float32": {"atol": 1e-5, "rtol": 1e-5}', '"float32": 1e-5'),
     r"TOLERANCES\['float32'\]"),
    (lambda s: s + "\nraise RuntimeError('boom')\n", "importing it failed: RuntimeError: boom"),
])
def test_malformed_task_folders_name_the_broken_part(silu_task_copy, edit, message):
    task_py = silu_task_copy / "task.py"
    task_py.write_text(edit(task_py.read_text()))
    with pytest.raises(TaskError, match=message):
        load_task(silu_task_copy)


def test_missing_task_file(tmp_path):
    with pytest.raises(TaskError, match="no task.py"):
        load_task(tmp_path)


def test_shapes_are_chosen_per_device(silu_task_copy):
    cpu, cuda = load_task(SILU_TASK, "cpu"), load_task(SILU_TASK, "cuda")
    assert {s["dtype"] for s in cpu.tuning_shapes} == {"float32"}
    assert "bfloat16" in {s["dtype"] for s in cuda.tuning_shapes}
    task_py = silu_task_copy / "task.py"
    task_py.write_text(task_py.read_text().replace('    "cuda": [', '    "gpu": [', 1))
    with pytest.raises(TaskError, match="no shapes for device 'cuda'; it has: cpu, gpu"):
        load_task(silu_task_copy, "cuda")


def test_a_shape_is_a_mapping_like_a_dict():
    # Generic code (the CUDA dispatch module choosing a route, a table built from tuning shapes)
    # takes a task's shapes as mappings: items(), keys() and get() are a dict's.
    from kernelswarm.search.dispatch import DispatchTable
    from kernelswarm.search.task import Shape

    shape = Shape.of({"tokens": 4, "d": 8, "dtype": "bfloat16"})
    assert sorted(shape.items()) == [("d", 8), ("dtype", "bfloat16"), ("tokens", 4)]
    assert dict(shape) == {"tokens": 4, "d": 8, "dtype": "bfloat16"} and shape.get("x") is None
    table = DispatchTable.build("k", [(Shape.of({"tokens": 1, "d": 8}), {"BLOCK": 64}),
                                      (Shape.of({"tokens": 4096, "d": 8}), {"BLOCK": 256})])
    assert table.select(Shape.of({"tokens": 4000, "d": 8})) == 1
