"""Profiling on a GPU by default only where something reads the profile: the LLM agent's roles."""

from __future__ import annotations

import pytest

from kernelswarm.experiments.config import load_config
from kernelswarm.experiments.run.prepare import evaluator_settings

LLM = ['agent.kind="llm"', 'agent.llm.model="m"', 'agent.llm.base_url="http://127.0.0.1:9/v1"']


@pytest.mark.parametrize(("overrides", "profiled"), [
    ([], False),
    (LLM, True),
    (["evaluator.profile_kernels=true"], True),
    ([*LLM, "evaluator.profile_kernels=false"], False),
])
def test_kernels_are_profiled_by_default_only_for_the_llm_agent(overrides, profiled):
    settings = evaluator_settings(load_config(None, overrides))
    assert settings.profile_kernels is profiled
