"""What of a dead worker's log is quoted in a verdict."""

from kernelswarm.evaluators.judge.runner_process import log_tail


def _crash_log(frames: int) -> str:
    stack = "\n".join(f'  File "/a/long/site-packages/path/module_{i}.py", line {i} in f{i}'
                      for i in range(frames))
    return ("loading kernel\nFatal Python error: Segmentation fault\n\n"
            f"Current thread 0x00007f (most recent call first):\n{stack}\n\n"
            "Extension modules: numpy.core, torch._C (total: 2)\n")


def test_a_long_crash_stack_keeps_the_line_that_names_the_signal():
    quoted = log_tail(_crash_log(frames=200), limit=600)
    assert quoted.startswith("Fatal Python error: Segmentation fault")
    assert "..." in quoted
    assert quoted.rstrip().endswith("line 199 in f199")  # the innermost frames are the end
    assert len(quoted) <= 600 + len("...\n")
    assert "Extension modules" not in quoted


def test_a_short_log_is_quoted_whole_and_an_ordinary_log_keeps_its_end():
    assert log_tail(_crash_log(frames=3)).startswith("Fatal Python error: Segmentation fault")
    assert "line 2 in f2" in log_tail(_crash_log(frames=3))
    ordinary = "\n".join(f"step {i}" for i in range(1000))
    quoted = log_tail(ordinary, limit=100)
    assert quoted.endswith("step 999") and "step 0\n" not in quoted and quoted.startswith("...")
