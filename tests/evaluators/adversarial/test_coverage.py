"""Coverage: held-out shapes beyond every size the tuning shapes reach, and ``eval`` checks as much
as a search does.

A kernel tuned on the task's shapes may assume what they all share: at most 64 rows, a width of
at most 4096. Each task therefore holds out, in every integer dimension, a size above the largest
power of two its tuning shapes reach. And ``kernelswarm eval`` of a file must catch what a search
would: the tester's extra checks (large input magnitudes, where ``exp`` overflows) included.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from rich.console import Console

from kernelswarm.experiments.commands.eval import add_eval_parser, run_eval_command
from kernelswarm.search import load_task
from tests.conftest import ROOT

from .cases import KERNELS

TASKS = sorted(p.name for p in (ROOT / "experiments" / "tasks").iterdir()
               if (p / "task.py").is_file())


def _largest_power_of_two_reached(values: list[int]) -> int:
    return 1 << (max(values).bit_length() - 1)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("name", TASKS)
def test_heldout_shapes_go_beyond_every_power_of_two_the_tuning_shapes_reach(name, device):
    task = load_task(ROOT / "experiments" / "tasks" / name, device)
    dims = {k for s in task.tuning_shapes for k, v in s.pairs
            if isinstance(v, int) and not isinstance(v, bool)}
    assert dims, f"{name} ({device}) has no integer dimension"
    short = []
    for dim in sorted(dims):
        threshold = _largest_power_of_two_reached([dict(s.pairs)[dim]
                                                   for s in task.tuning_shapes])
        held = [dict(s.pairs).get(dim, 0) for s in task.heldout_shapes]
        if not any(v > threshold for v in held):
            short.append(f"{dim}: tuning shapes reach {threshold}, held-out at most {max(held)}")
    assert not short, f"{name} ({device}): " + "; ".join(short)


def _eval(task: str, kernel: Path, capsys: pytest.CaptureFixture,
          device: str = "cpu") -> tuple[int, dict]:
    """``kernelswarm eval TASK KERNEL --device DEVICE --json``: its exit status and document."""
    parser = argparse.ArgumentParser()
    add_eval_parser(parser.add_subparsers())
    args = parser.parse_args(["eval", task, str(kernel), "--device", device, "--json"])
    code = run_eval_command(args, Console(quiet=True))
    return code, json.loads(capsys.readouterr().out)


def test_eval_catches_a_kernel_wrong_only_for_large_magnitudes(capsys):
    # NaN once exp overflows: no tuning or held-out input reaches it, the large-magnitude check does
    code, doc = _eval("silu_and_mul", KERNELS / "cpp" / "wrong_for_large_magnitudes.cpp", capsys)
    assert (code, doc["status"]) == (1, "INCORRECT"), doc["message"]
    assert "extra check" in doc["message"]


def test_eval_catches_a_kernel_that_skips_rows_past_64(capsys):
    code, doc = _eval("silu_and_mul", KERNELS / "cpp" / "skips_rows_past_64.cpp", capsys)
    assert (code, doc["status"]) == (1, "INCORRECT"), doc["message"]
    assert "held-out" in doc["message"]


@pytest.mark.gpu
def test_eval_on_a_gpu_catches_a_cuda_kernel_wrong_only_for_large_magnitudes(capsys):
    code, doc = _eval("silu_and_mul", KERNELS / "cuda" / "wrong_for_large_magnitudes.cu", capsys,
                      device="cuda")
    assert (code, doc["status"]) == (1, "INCORRECT"), doc["message"]
    assert "extra check" in doc["message"]
