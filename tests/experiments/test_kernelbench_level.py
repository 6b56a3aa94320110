"""A whole KernelBench level imported at once: every problem that can be a task becomes one, and
the report names each that cannot with the reason; synthetic problems in a checkout's layout."""

from __future__ import annotations

from pathlib import Path

from kernelswarm.experiments.commands.cli import main
from kernelswarm.experiments.kernelbench.level import ImportStatus, import_level
from kernelswarm.search import load_task

RELU = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


batch_size = 16
dim = 16384 * 4


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

SUM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.sum(x, dim=self.dim, keepdim=True)


batch_size = 16
dim1 = dim2 = 256
reduce_dim = 1


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return [reduce_dim]
'''

NOT_A_PROBLEM = "import torch\n\n\ndef helper():\n    return 1\n"
A_STRING_INPUT = RELU.replace("[torch.randn(batch_size, dim)]", '[torch.randn(batch_size, dim), "x"]'
                              ).replace("forward(self, x)", "forward(self, x, mode)")


def _checkout(root: Path, files: dict[str, str]) -> Path:
    level = root / "KernelBench" / "level1"
    level.mkdir(parents=True)
    for name, text in files.items():
        (level / name).write_text(text)
    return root


def test_a_level_imports_what_it_can_and_names_the_rest(tmp_path, capsys):
    checkout = _checkout(tmp_path / "kb", {
        "1_ReLU.py": RELU, "2_Sum.py": SUM, "10_Helper.py": NOT_A_PROBLEM,
        "3_String.py": A_STRING_INPUT})
    dest = tmp_path / "tasks"
    assert main(["tasks", "import-kernelbench", str(checkout), str(dest), "--level", "1"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "KernelBench level 1: 2 of 4 imported" in out
    assert all(name in out for name in ("1_ReLU", "2_Sum", "3_String", "10_Helper"))
    reasons = {r.problem: r.reason for r in import_level(checkout, 1, tmp_path / "again")
               if r.status is ImportStatus.FAILED}
    assert "does not define Model, get_inputs, get_init_inputs" in reasons["10_Helper"]
    assert "get_inputs()[1] is 'x'" in reasons["3_String"]
    assert list(reasons) == ["3_String", "10_Helper"]  # in KernelBench's numbering
    assert sorted(p.name for p in dest.iterdir()) == ["1_ReLU", "2_Sum"]
    relu = load_task(dest / "1_ReLU", "cpu")
    assert relu.tuning_shapes[0]["dim"] < 65536  # shrunk for the cpu
    assert load_task(dest / "1_ReLU", "cuda").tuning_shapes[0]["dim"] == 65536
    total = load_task(dest / "2_Sum", "cpu")
    assert total.tuning_shapes[0]["reduce_dim"] == 1  # a setting, not a size
    assert "int64_t dim," in total.module.c_signature()
    # a second run keeps what is there and says so
    results = import_level(checkout, 1, dest, only=["1_", "2_"])
    assert [r.status for r in results] == [ImportStatus.SKIPPED, ImportStatus.SKIPPED]


def test_a_level_where_nothing_imports_fails_and_a_missing_level_is_named(tmp_path, capsys):
    checkout = _checkout(tmp_path / "kb", {"1_Helper.py": NOT_A_PROBLEM})
    assert main(["tasks", "import-kernelbench", str(checkout), str(tmp_path / "out"),
                 "--level", "1"]) == 1
    assert "0 of 1 imported" in capsys.readouterr().out
    assert main(["tasks", "import-kernelbench", str(checkout), str(tmp_path / "out"),
                 "--level", "2"]) == 2
    assert "no level 2 problems found" in " ".join(capsys.readouterr().out.split())
