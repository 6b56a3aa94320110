"""The environment variables that candidate code (and its compiler) may see.

Rule: a variable is dropped when its name, upper-cased, contains one of ``SECRET_WORDS`` or starts
with one of ``SECRET_PREFIXES``. Everything else (PATH, PYTHONPATH, LD_LIBRARY_PATH, locale,
CUDA_VISIBLE_DEVICES, ...) is kept, because the sandbox must still import torch and the task.
The words catch generic names (``API_KEY``, ``GITHUB_TOKEN``, ``DB_PASSWORD``, ``http_proxy``
which may embed ``user:pass@``); the prefixes catch services whose variables carry credentials or
point at private endpoints under innocent names (``AWS_*``, ``HF_*``, ``MLFLOW_TRACKING_*``, ...).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE",
                "PRIVATE", "PROXY", "SESSION")
SECRET_PREFIXES = ("AWS_", "AZURE_", "GOOGLE_", "GCP_", "GCLOUD_", "OPENAI", "ANTHROPIC", "HF_",
                   "HUGGING", "MLFLOW_TRACKING_", "WANDB_", "GITHUB_", "GH_", "GITLAB_",
                   "DATABRICKS_", "RAY_", "SSH_", "GPG_", "NETRC", "DOCKER_", "KUBE", "COHERE",
                   "MISTRAL", "GROQ", "TOGETHER", "DEEPSEEK", "GEMINI", "REPLICATE")


def is_secret_name(name: str) -> bool:
    """Whether a variable of this name is withheld from candidate code."""
    upper = name.upper()
    return any(word in upper for word in SECRET_WORDS) or upper.startswith(SECRET_PREFIXES)


def scrubbed_environment(environ: Mapping[str, str] | None = None,
                         extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of ``environ`` (default: this process's) without secrets, plus ``extra``."""
    source = os.environ if environ is None else environ
    env = {k: v for k, v in source.items() if not is_secret_name(k)}
    env.update(extra or {})
    return env


def python_path() -> str:
    """This process's import path, so that a child process imports the same kernelswarm."""
    entries = [os.path.abspath(p or os.getcwd()) for p in sys.path]
    return os.pathsep.join(dict.fromkeys(p for p in entries if os.path.isdir(p)))
