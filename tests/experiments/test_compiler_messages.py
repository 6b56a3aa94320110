"""A compiler's message reaches the user whole and naming the user's file: console markup
must not read ``x[i]`` as a tag, and the evaluator's ``kernel.cpp`` is the file the user wrote."""

from __future__ import annotations

from pathlib import Path

from kernelswarm.experiments.authoring.task_folders import scaffold_task
from kernelswarm.experiments.commands.cli import main
from kernelswarm.experiments.run.compiler_messages import naming_the_file
from kernelswarm.search import Evaluation, Status

BROKEN = "out[i] = alpha * x[i] + y[i] + undefined_z[i];"


def test_tasks_check_prints_the_compiler_message_whole_naming_the_users_file(
        tmp_path, capsys, monkeypatch, compile_cache):
    monkeypatch.setenv("KERNELSWARM_CACHE", str(compile_cache))
    monkeypatch.setenv("COLUMNS", "240")  # the source line on one line
    folder = scaffold_task("my_op", tmp_path)
    kernel = folder / "my_op.cpp"
    kernel.write_text(kernel.read_text().replace("out[i] = alpha * x[i] + y[i];", BROKEN))
    assert main(["tasks", "check", str(folder), "--evaluate"]) == 1
    out = capsys.readouterr().out
    assert "COMPILE_ERROR" in out
    assert f"{kernel}:5:" in out and "kernel.cpp" not in out
    assert BROKEN.rstrip(";") in out  # rich markup would print "out = alpha * x + y + ..."


def test_a_file_with_a_knob_header_is_named_at_its_own_line_numbers(tmp_path):
    source = "int f() {\n  return x[i]\n}\n"
    text = "// knob header\n#define KS_UNROLL 4\n// end of header\n" + source
    failed = Evaluation(candidate_id="c", status=Status.COMPILE_ERROR,
                        message="kernel.cpp: In function 'int f()':\n"
                                "kernel.cpp:2:14: error: 'x' was not declared")
    path = Path(tmp_path / "best" / "abc.cpp")
    named = naming_the_file(failed, path, text, source)
    assert named.message == (f"{path}: In function 'int f()':\n"
                             f"{path}:5:14: error: 'x' was not declared")
    # a file that does not hold the built source: the compiler's words are left as they are
    assert naming_the_file(failed, path, "other", source) == failed
