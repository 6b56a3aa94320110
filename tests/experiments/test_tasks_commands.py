"""``kernelswarm tasks``: the listing, a scaffold that evaluates, and malformed folders named
precisely by ``tasks check`` (and by ``run --task``)."""

from __future__ import annotations

import pytest

from kernelswarm.experiments.authoring.task_folders import check_task, list_tasks, scaffold_task
from kernelswarm.experiments.commands.cli import main
from kernelswarm.experiments.config import BUILTIN_TASKS
from kernelswarm.search import TaskError, load_task


@pytest.fixture
def wide(monkeypatch):
    """A wide console, so that table cells are not cut."""
    monkeypatch.setenv("COLUMNS", "240")


def test_listing_shows_each_builtin_task_with_languages_and_shape_counts():
    listed = {item.name: item for item in list_tasks()}
    assert {"silu_and_mul", "fused_add_rmsnorm", "merge_attn_states_lse", "softmax",
            "gemm"} <= set(listed)
    rmsnorm = listed["fused_add_rmsnorm"]
    assert "cpp" in rmsnorm.languages and not rmsnorm.problem
    for device in ("cpu", "cuda"):
        task = load_task(BUILTIN_TASKS / "fused_add_rmsnorm", device)
        assert rmsnorm.shapes[device] == (len(task.tuning_shapes), len(task.heldout_shapes))
    assert rmsnorm.shapes["cuda"][0] > rmsnorm.shapes["cpu"][0]


def test_tasks_command_prints_the_table_with_the_configs_own_task(tmp_path, capsys, wide):
    folder = scaffold_task("my_op", tmp_path)
    config = tmp_path / "mine.toml"
    config.write_text(f'[task]\nname = "{folder}"\n')
    assert main(["tasks", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "gemm" in out and "merge_attn_states_lse" in out and "built-in" in out
    assert "my_op" in out and str(folder) in out
    assert "3 + 2" in out  # the scaffold's cpu shapes: 3 tuning + 2 held-out
    # a task with shapes for the cpu only shows none for the GPU
    row = next(line for line in out.splitlines() if "my_op" in line)
    assert "-" in row.replace("my_op", "")


def test_a_new_task_evaluates_ok_out_of_the_box(tmp_path, capsys, monkeypatch, compile_cache):
    monkeypatch.setenv("KERNELSWARM_CACHE", str(compile_cache))
    assert main(["tasks", "new", "scaled_add", "--dir", str(tmp_path)]) == 0
    folder = tmp_path / "scaled_add"
    assert (folder / "task.py").is_file() and (folder / "scaled_add.cpp").is_file()
    assert load_task(folder).starting_candidate("cpp").entry == "scaled_add"
    assert main(["tasks", "check", str(folder), "--evaluate"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "ok: task 'scaled_add'" in out
    assert "starting cpp kernel: OK correct on 3 tuning shapes" in out


def test_new_refuses_a_bad_name_and_an_existing_folder(tmp_path, capsys):
    assert main(["tasks", "new", "my-op", "--dir", str(tmp_path)]) == 2
    assert "must be a C identifier" in capsys.readouterr().out
    scaffold_task("my_op", tmp_path)
    with pytest.raises(TaskError, match="already exists"):
        scaffold_task("my_op", tmp_path)


BROKEN = [
    ('{"n": 4096, "dtype": "float32"}', '{"n": 4096}',
     r"TUNING_SHAPES\[0\] = \{'n': 4096\} has no 'dtype'"),
    ('    "float32": {"atol": 1e-6, "rtol": 1e-6},\n', "",
     r"TOLERANCES has no entry for dtype 'float32', which TUNING_SHAPES uses \(dtype=float32,n=4096\)"),
    ('        "argtypes": ["ptr", "ptr", "ptr", "i64", "f32"],', "",
     r"KERNELS\['cpp'\] needs 'argtypes'"),
    ('["ptr", "ptr", "ptr", "i64", "f32"]', '["ptr", "ptr", "pointer", "i64", "f32"]',
     r"unknown kinds \['pointer'\]"),
    ("    return moved, flops", "    return moved",
     r"roofline\(dtype=float32,n=4096\) must return \(bytes, flops\), two numbers; got 49152"),
    ('moved = 3 * shape["n"] * size', 'moved = 3 * shape["length"] * size',
     r"roofline\(dtype=float32,n=4096\) raised KeyError: 'length'"),
    ("return (ALPHA * x + y,)", "return (ALPHA * x[:-1] + y[:-1],)",
     r"on shape dtype=float32,n=4096: make_outputs\(\) and reference\(\) disagree: output 0 has "
     r"shape torch.Size\(\[4096\]\), the reference has torch.Size\(\[4095\]\)"),
    ('x = torch.randn(shape["n"]', 'x = torch.randn(shape["size"]',
     r"make_inputs\(\) raised KeyError: 'size'"),
]


@pytest.mark.parametrize("old, new, message", BROKEN,
                         ids=["no dtype", "no tolerance", "no argtypes", "bad argtype",
                              "roofline one number", "roofline raises", "reference shape",
                              "make_inputs raises"])
def test_check_names_the_first_problem(tmp_path, old, new, message):
    folder = scaffold_task("op", tmp_path)
    task_py = folder / "task.py"
    text = task_py.read_text()
    assert old in text
    task_py.write_text(text.replace(old, new, 1))
    with pytest.raises(TaskError, match=message):
        check_task(folder)


def test_check_and_run_report_a_broken_task_and_exit_2(tmp_path, capsys, wide):
    folder = scaffold_task("op", tmp_path)
    task_py = folder / "task.py"
    task_py.write_text(task_py.read_text().replace('"dtype": "float32"}', "}", 1))
    assert main(["tasks", "check", str(folder)]) == 2
    assert "has no 'dtype'" in capsys.readouterr().out
    # run --task is task.name: the same error, before anything starts
    out_dir = tmp_path / "runs"
    assert main(["run", "--task", str(folder), "--set", f'run.out_dir="{out_dir}"']) == 2
    assert "has no 'dtype'" in capsys.readouterr().out
    assert not out_dir.exists()


def test_run_task_flag_names_an_unknown_task(capsys, wide):
    assert main(["run", "--task", "no_such_task"]) == 2
    assert "'no_such_task' is neither a built-in task" in capsys.readouterr().out


def test_the_listing_at_80_columns_keeps_every_task_name_whole(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    for item in list_tasks():
        assert f"│ {item.name} " in out  # whole, never "merge_attn_states…"
