"""The LLM agent: planner, coder, tester and analyst driven by language models over any
OpenAI-compatible endpoint (OpenAI, vLLM, SGLang, Ollama), through the openai package.

``LLMRoleFactory`` builds a lineage's roles from ``LLMSettings``; ``LoopbackServer`` is a
scriptable OpenAI-protocol server on 127.0.0.1 for tests and benchmarks. See docs/llm.md.
"""

from .answers import LLM_MOVE, MoveChoice
from .client import ChatClient, LLMError, MalformedAnswer, MissingAPIKey, SpendLimitReached
from .factory import LLMRoleFactory, llm_roles
from .ledger import Ledger, LedgerState, Waiting, read_states
from .loopback import LoopbackServer, Received, Reply, always
from .roles import LLMAnalyst, LLMCoder, LLMPlanner, LLMTester
from .settings import ROLE_NAMES, LLMSettings, Price, RoleModel, SpendLimit
from .templates import PromptTemplate, TemplateError, load_templates
from .trace import START_LINEAGE, TRACE_FOLDER, LLMCall, TraceError, trace_file, trace_lineage

__all__ = [
    "LLM_MOVE", "ROLE_NAMES", "ChatClient", "LLMAnalyst", "LLMCall", "LLMCoder", "LLMError",
    "LLMPlanner", "LLMRoleFactory", "LLMSettings", "LLMTester", "Ledger", "LoopbackServer",
    "MalformedAnswer", "MissingAPIKey", "MoveChoice", "Price", "PromptTemplate", "Received",
    "Reply", "RoleModel", "SpendLimit", "SpendLimitReached", "TemplateError", "llm_roles",
    "load_templates", "TRACE_FOLDER", "TraceError", "trace_file", "trace_lineage",
    "LedgerState", "START_LINEAGE", "Waiting", "always", "read_states",
]
