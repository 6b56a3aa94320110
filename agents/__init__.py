"""The roles of a lineage (plan, code, test, profile): the built-in agent's rules and the LLM
agent.

``builtin_roles(seed)`` is what a search uses when no model is configured. The LLM agent's names
(``LLMRoleFactory``, ``LLMSettings``, its trace and ledger, ...) are imported on first use: the
process that uses none of them never loads the agent's client or its server.
"""

from __future__ import annotations

import importlib
from typing import Any

from .builtin import (
    TRANSFORMATIONS,
    RuleAnalyst,
    RuleCoder,
    RulePlanner,
    RuleTester,
    Transformation,
    builtin_roles,
    find_transformation,
    transformations_for,
)

# name -> the module of agents/llm/ that defines it
_LLM = {
    "LLMRoleFactory": "llm", "LLMSettings": "llm", "MissingAPIKey": "llm", "Price": "llm",
    "ROLE_NAMES": "llm", "RoleModel": "llm", "SpendLimit": "llm", "TemplateError": "llm",
    "load_templates": "llm",
    "read_api_key": "llm.client",
    "EndpointProblem": "llm.endpoint", "check_endpoints": "llm.endpoint",
    "LedgerState": "llm.ledger", "read_states": "llm.ledger",
    "LLMCall": "llm.trace", "START_LINEAGE": "llm.trace", "TRACE_FOLDER": "llm.trace",
    "TraceError": "llm.trace", "trace_file": "llm.trace", "trace_lineage": "llm.trace",
}

__all__ = [
    "TRANSFORMATIONS", "RuleAnalyst", "RuleCoder", "RulePlanner", "RuleTester", "Transformation",
    "builtin_roles", "find_transformation", "transformations_for", *_LLM,
]


def __getattr__(name: str) -> Any:
    if name not in _LLM:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_LLM[name]}", __name__), name)
