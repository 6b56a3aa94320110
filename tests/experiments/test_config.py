"""Configuration: the quickstart validates, and bad input names the key."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kernelswarm.experiments.config import ConfigError, load_config


def test_quickstart_is_valid_and_names_the_builtin_task():
    config = load_config()
    assert config.task.name == "silu_and_mul" and config.task.language == "cpp"
    assert config.search.lineages == 4
    assert config.task_path().name == "silu_and_mul"


def test_overrides_are_typed_toml_values():
    config = load_config(None, ["search.lineages=7", "timing.flush_cache=true",
                                "task.name=silu_and_mul", 'tracking.experiment="exp 1"'])
    assert config.search.lineages == 7 and config.timing.flush_cache is True
    assert config.tracking.experiment == "exp 1"


@pytest.mark.parametrize("override, message", [
    ("search.lineage=3", "search.lineage: unknown key; allowed here: candidates_per_lineage"),
    ("search.lineages=0", "search.lineages: Input should be greater than or equal to 1"),
    ('task.language="rust"', "task.language: Input should be 'cpp', 'cuda', 'torch-ext', "
                             "'triton' or 'cute'"),
    ("evaluator.workers=0", "evaluator.workers: must be >= 1"),
    ("bogus.key=1", "bogus: unknown key; allowed here: agent, cluster"),
])
def test_a_bad_override_is_named_as_typed_not_blamed_on_the_file(override, message):
    with pytest.raises(ConfigError) as raised:
        load_config(None, [override])
    text = str(raised.value)
    assert f"--set {override}: {message}" in text
    assert "quickstart.toml" not in text  # the file is fine; the override is not


@pytest.mark.parametrize("override, message", [
    ("lineages=3", "KEY must name a key inside a section, e.g. search.lineages"),
    ("search.lineages", "expected KEY=VALUE"),
])
def test_an_override_that_is_no_key_is_named(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


def test_the_file_and_the_override_are_each_named_for_their_own_problem(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[search]\nlineagez = 3\n")
    with pytest.raises(ConfigError) as raised:
        load_config(bad, ["search.lineages=-1"])
    lines = str(raised.value).splitlines()
    assert lines[0] == f"{bad}: invalid configuration:"
    assert "  search.lineagez: unknown key" in "\n".join(lines)
    assert "  --set search.lineages=-1: search.lineages: Input should be greater than or equal to 1 (got -1)" \
        in lines


def test_a_malformed_file_is_named(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[search]\nlineages = = 3\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="no such configuration file"):
        load_config(tmp_path / "missing.toml")


def test_unknown_task_lists_the_builtin_ones(tmp_path):
    config = load_config(None, ["task.name=no_such_task"])
    with pytest.raises(ConfigError, match="built-in task .*silu_and_mul"):
        config.task_path()


def test_cli_reports_a_bad_config_and_exits_2(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[search]\nlineagez = 3\n")
    proc = subprocess.run([sys.executable, "-m", "kernelswarm.experiments.commands.cli", "run",
                           str(bad)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2
    assert f"{bad}: invalid configuration" in proc.stdout
    assert "search.lineagez: unknown key" in proc.stdout
    assert not (tmp_path / "runs").exists()  # nothing started


def test_every_evaluator_setting_is_reachable_from_a_config(tmp_path):
    import dataclasses

    from kernelswarm.evaluators import EvaluatorSettings
    from kernelswarm.experiments.run.execute import evaluator_settings

    config = load_config(None, [
        'evaluator.device="cuda"', "evaluator.compile_timeout_s=11", "evaluator.run_timeout_s=12",
        "evaluator.seeds=4", "evaluator.check_heldout=false", f'evaluator.cache_dir="{tmp_path}"',
        'evaluator.cuda_arch="sm_90"', "evaluator.profile_kernels=false", "evaluator.ncu=true",
        "evaluator.ncu_timeout_s=33", "timing.warmup=5", "timing.min_repeats=6",
        "timing.max_repeats=70", "timing.target_rel_se=0.02", "timing.budget_s=0.7",
        "timing.flush_cache=false", "timing.cuda_graph_below_us=8"])
    from kernelswarm.search import Check

    settings = evaluator_settings(config, (Check({"d": 3}, 2.0, "odd"),))
    defaults = EvaluatorSettings()
    unchanged = [f.name for f in dataclasses.fields(EvaluatorSettings)
                 if getattr(settings, f.name) == getattr(defaults, f.name)]
    # memory_limit_mb is cpu-only and must stay unset on cuda; extra_checks come from the tester
    # (search.tester)
    assert unchanged == ["memory_limit_mb"], f"settings no config key reaches: {unchanged}"


def test_the_wall_time_budget_is_the_searchs_for_the_lineages_and_the_model_calls(tmp_path):
    from rich.console import Console

    from kernelswarm.experiments.agent.roles import llm_settings
    from kernelswarm.experiments.run.prepare import prepare_run

    config = load_config(None, [f'run.out_dir="{tmp_path / "runs"}"', "search.wall_time_s=90"])
    prepared = prepare_run(config, Console(file=open("/dev/null", "w")))  # noqa: SIM115
    spec = prepared.spec(1, {"num_cpus": 1})
    # the lineages' budget counts from the search's start (cluster/swarm.py sets the deadline
    # once the starting kernels are judged); the run's start is what start-up counts from
    assert spec.budget.wall_s == 90 and spec.started == prepared.started
    llm = load_config(None, ["agent.kind=llm", "agent.llm.model=small", "search.wall_time_s=90"])
    settings = llm_settings(llm)
    assert settings.wall_s == 90 and settings.deadline is None  # each lineage's: Roles.until
