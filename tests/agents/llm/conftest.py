"""Fixtures for the LLM agent's tests: a real OpenAI-protocol server on loopback, the real
openai client, real C++ variants of silu_and_mul judged by the project's sandboxed evaluator.

The API key lives in the environment before any test starts Ray: Ray's worker processes inherit
the environment of the process that starts Ray, and the lineages' clients read the key there.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest

from kernelswarm.agents.llm import ROLE_NAMES, LLMSettings, LoopbackServer, Price, RoleModel

KEY_ENV = "KERNELSWARM_TEST_LLM_API_KEY"
os.environ.setdefault(KEY_ENV, f"sk-loopback-{secrets.token_hex(12)}")
API_KEY = os.environ[KEY_ENV]
MODEL = "loopback-coder-1"
PRICE = Price(prompt=3.0, completion=15.0)  # $ per 1M tokens


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer(api_key=API_KEY) as running:
        yield running


def settings_for(server: LoopbackServer, *, timeout_s: float = 5.0, max_retries: int = 2,
                 max_tokens: int = 4096, **extra: object) -> LLMSettings:
    """Every role on the loopback server, quick retries."""
    model = RoleModel(MODEL, base_url=server.url, api_key_env=KEY_ENV, timeout_s=timeout_s,
                      max_retries=max_retries, max_tokens=max_tokens)
    return LLMSettings(roles={name: model for name in ROLE_NAMES}, prices={MODEL: PRICE},
                       backoff_s=0.01, backoff_max_s=0.05, **extra)
