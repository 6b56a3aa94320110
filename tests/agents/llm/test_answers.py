"""Strict reading of kernels and checks, diffs, and prompt templates from a user's folder."""

from __future__ import annotations

import pytest

from kernelswarm.agents.llm import MalformedAnswer, TemplateError, load_templates
from kernelswarm.agents.llm.answers import parse_checks, parse_kernel
from tests.agents.llm import answers


def test_a_diff_against_the_current_kernel_is_applied(start):
    diff = ("```diff\n@@ -12,2 +12,2 @@\n"
            "             float g = gate[i];\n"
            "-            row[i] = g / (1.0f + expf(-g)) * up[i];\n"
            "+            row[i] = g * up[i] / (1.0f + expf(-g));\n```\n"
            "```json\n{\"knobs\": {}, \"summary\": \"one division\"}\n```")
    kernel = parse_kernel(diff, start)
    assert "row[i] = g * up[i] / (1.0f + expf(-g));" in kernel.source
    assert "g / (1.0f" not in kernel.source and kernel.summary == "one division"
    stale = diff.replace("float g = gate[i];", "float g = gate[i] * 1.0f;")
    with pytest.raises(MalformedAnswer, match="hunk 1 of the diff does not apply"):
        parse_kernel(stale, start)


@pytest.mark.parametrize("answer, message", [
    (answers.kernel(answers.FAST) + "```cpp\nint x;\n```", "give exactly one kernel"),
    (answers.kernel(answers.FAST.replace("silu_and_mul(", "silu(")), "must still define"),
    (answers.kernel(answers.FAST, {"BLOCK": [64, 128]}), "knob BLOCK is declared but"),
    (answers.kernel(answers.FAST, {"V": [4, 4]}), "values must be distinct"),
    (answers.kernel(answers.START), "the same as the current one"),
    (answers.kernel(answers.FAST).replace('"knobs": {}, ', ""), "needs \"knobs\""),
])
def test_a_kernel_answer_that_breaks_the_format_says_what_to_fix(start, answer, message):
    with pytest.raises(MalformedAnswer, match=message):
        parse_kernel(answer, start)


def test_checks_are_held_to_the_task_shapes(silu_task):
    def check(**shape):
        return answers.checks({"shape": shape, "scale": 1.0})

    for answer, message in [
        (check(tokens=1, d=7, dtype="bfloat16"), "dtype must be one of the task.s dtypes here, float32; got .bfloat16."),
        (check(tokens=1, d=10**7, dtype="float32"), "must be an integer from 1 to 16384"),
        (answers.checks({"shape": {"tokens": 1, "d": 7, "dtype": "float32"}, "scale": -1}),
         "scale must be a number"),
    ]:
        with pytest.raises(MalformedAnswer, match=message):
            parse_checks(answer, silu_task)
    assert parse_checks(answers.checks(), silu_task) == ()


def test_a_prompt_folder_overrides_templates_and_bad_placeholders_are_named(tmp_path):
    (tmp_path / "planner.md").write_text("<!-- system -->\nBe brief.\n<!-- user -->\n"
                                         "Kernel:\n$kernel\nCosts $$0.\nMoves: $moves\n")
    templates = load_templates(tmp_path)
    assert templates["planner"].path == tmp_path / "planner.md"
    assert templates["coder"].path.parent.name == "prompts"  # the built-in one
    messages = templates["planner"].render({"kernel": "K", "moves": "tune"})
    assert messages == [{"role": "system", "content": "Be brief."},
                        {"role": "user", "content": "Kernel:\nK\nCosts $0.\nMoves: tune"}]
    (tmp_path / "coder.md").write_text("Write $kernell now")
    with pytest.raises(TemplateError, match=r"coder.md: unknown placeholder\(s\) \$kernell"):
        load_templates(tmp_path)
