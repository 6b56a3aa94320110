"""The command line starts fast: what a command does not need before it works is not imported.

Timing a command would fail on a loaded machine and pass on a slow import; what made it slow is
pinned instead: the libraries a command line loads, read from ``sys.modules`` in a fresh
interpreter. Also ``--version`` and ``run --dry-run``.
"""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from kernelswarm.experiments.commands.cli import COMMANDS

# Each costs from 0.1 s (rich) to 2.5 s (torch) to import on a 2-core machine.
HEAVY = ("torch", "ray", "mlflow", "matplotlib", "pandas", "pyarrow", "optuna", "pydantic",
         "rich", "numpy")
# What a command may not load before it has checked its arguments and configuration.
RUNTIME = ("torch", "ray", "mlflow", "matplotlib", "pandas")

_PROBE = """
import sys
from kernelswarm.experiments.commands.cli import main
try:
    status = main(sys.argv[1:])
except SystemExit as exc:
    status = exc.code
print("\\nMODULES", status, " ".join(sorted({m.split(".")[0] for m in sys.modules})))
"""


def _cli(*argv: str, cwd: Path | None = None) -> tuple[int, str, set[str]]:
    """Exit status, output and top-level packages loaded by ``kernelswarm ARGV``, run in a
    fresh interpreter."""
    proc = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True,
                          timeout=300, cwd=cwd)
    output, _, last = proc.stdout.rpartition("\nMODULES ")
    assert last, proc.stdout + proc.stderr
    status, *modules = last.split()
    return int(status), output + proc.stderr, set(modules)


@pytest.mark.parametrize("argv", [["--help"], ["--version"]])
def test_help_and_version_load_no_library_beyond_the_standard_one(argv):
    status, _, modules = _cli(*argv)
    assert status == 0
    assert not modules & set(HEAVY), sorted(modules & set(HEAVY))


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_commands_help_loads_none_of_what_its_work_needs(command):
    status, output, modules = _cli(command, "--help")
    assert status == 0 and f"usage: kernelswarm {command}" in output
    assert not modules & set(RUNTIME), sorted(modules & set(RUNTIME))


def test_a_bad_configuration_is_refused_before_ray_torch_or_mlflow_load(tmp_path):
    status, output, modules = _cli("run", "--set", "search.lineagez=3", cwd=tmp_path)
    assert status == 2
    assert "search.lineagez: unknown key" in output
    assert not modules & set(RUNTIME), sorted(modules & set(RUNTIME))


def test_version_prints_the_installed_packages_version():
    proc = subprocess.run([sys.executable, "-m", "kernelswarm.experiments.commands.cli",
                           "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"kernelswarm {version('kernelswarm')}"


def test_kernelswarm_help_lists_every_command_with_its_own_help_line():
    """The top level lists commands without importing them: each line must be the one the
    command's module registers."""
    from kernelswarm.experiments.commands.cli import parser_for

    listed = parser_for(None)._subparsers._group_actions[0]
    for name in COMMANDS:
        own = parser_for(name)._subparsers._group_actions[0]
        assert [a.help for a in listed._choices_actions if a.dest == name] == \
            [a.help for a in own._choices_actions if a.dest == name], name


def test_dry_run_checks_the_task_and_builds_the_start_and_starts_nothing(tmp_path):
    status, output, modules = _cli("run", "--dry-run", "--set", "search.lineages=3",
                                   cwd=tmp_path)
    assert status == 0, output
    assert "start (cpp)" in output and "silu_and_mul.cpp: built" in output
    assert "3 lineage(s)" in output
    assert "mlflow" not in modules  # no MLflow run: MLflow is not even loaded
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no run folder, no mlflow.db


def test_dry_run_refuses_a_bad_configuration_with_exit_2(tmp_path):
    status, output, _ = _cli("run", "--dry-run", "--set", "search.lineages=0", cwd=tmp_path)
    assert status == 2
    assert "search.lineages" in output
    assert not (tmp_path / "runs").exists()


def test_dry_run_names_the_users_file_when_the_start_does_not_build(silu_task_copy, tmp_path):
    kernel = silu_task_copy / "silu_and_mul.cpp"
    kernel.write_text(kernel.read_text().replace(";", "", 1))
    status, output, _ = _cli("run", "--dry-run", "--task", str(silu_task_copy),
                             "--set", f'evaluator.cache_dir="{tmp_path / "cache"}"',
                             cwd=tmp_path)
    assert status == 1
    assert "does not" in output or "fails" in output
    assert str(kernel) in output.replace("\n", "")
    assert not (tmp_path / "runs").exists()


def test_dry_run_refuses_an_llm_endpoint_that_cannot_serve(tmp_path):
    status, output, modules = _cli(
        "run", "--dry-run", "--set", 'agent.kind="llm"', "--set", 'agent.llm.model="m"',
        "--set", 'agent.llm.base_url="http://127.0.0.1:9/v1"', "--set", 'agent.llm.api_key_env=""',
        cwd=tmp_path)
    assert status == 2, output
    assert "agent.llm.base_url" in output
    assert "ray" not in modules
