"""Checking the roles' endpoints before a run starts: each server reachable, speaking OpenAI's
protocol, taking the key, and serving the model (where it lists the models it serves).

Without it a wrong ``base_url`` shows only once every lineage has spent its retries on it, after
Ray, the actors and the starting kernel. ``check_endpoints`` asks each distinct server once
(``GET /models``, which OpenAI, vLLM, SGLang and Ollama all answer), all at once, within a few
seconds, and spends no tokens: a server that lists no models is asked for a chat completion of
no messages, which a server of the protocol refuses (HTTP 400) without running the model.

What it cannot tell from a glance (a server error, a rate limit) is left to the run's retries:
only a fault that no retry mends is reported.
"""

from __future__ import annotations

import enum
import json
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass

from .client import endpoint_of, openai_client
from .settings import RoleModel

CHECK_S = 3.0  # every endpoint answers within this, or is refused: a run is refused in < 5 s
NO_ENDPOINT = (404, 405, 501)  # no such path or method on that server
KEY_REFUSED = (401, 403)
Served = list[str]  # the models a server lists (empty: it names none)


class Fault(str, enum.Enum):
    """What is wrong with an endpoint, and so which setting to fix."""

    UNREACHABLE = "unreachable"  # nothing answers there (refused, unknown host, no answer)
    NOT_OPENAI = "not_openai"  # a server answers, but not OpenAI's protocol at that path
    KEY_REFUSED = "key_refused"  # the server refuses the key
    UNKNOWN_MODEL = "unknown_model"  # the server lists its models and this one is not among them

    @property
    def setting(self) -> str:
        """The role setting that holds what is wrong: ``base_url``, ``api_key_env``, ``model``."""
        return {"key_refused": "api_key_env", "unknown_model": "model"}.get(self.value, "base_url")


@dataclass(frozen=True)
class EndpointProblem:
    """One endpoint that a run cannot use, the roles that would call it and why (one line);
    ``model``: the settings of the first of them (an ``UNKNOWN_MODEL``'s: of every one)."""

    roles: tuple[str, ...]
    model: RoleModel
    fault: Fault
    detail: str

    @property
    def endpoint(self) -> str:
        return endpoint_of(self.model)


def check_endpoints(roles: Mapping[str, RoleModel],
                    within_s: float = CHECK_S) -> tuple[EndpointProblem, ...]:
    """The problems of the roles' endpoints, each server asked once, together, within
    ``within_s``; empty when every role can be served. Reads the API keys (``MissingAPIKey``
    when a variable is not set)."""
    servers: dict[tuple[str, str], dict[str, list[str]]] = {}  # (url, key) -> model -> roles
    for name, model in roles.items():
        server = servers.setdefault((endpoint_of(model), model.api_key_env), {})
        server.setdefault(model.model, []).append(name)
    asker = {key: next(iter(models.values()))[0] for key, models in servers.items()}
    first = {key: roles[name] for key, name in asker.items()}
    deadline = time.monotonic() + within_s
    # Not a ``with`` block: its exit would wait for a server that never answers.
    pool = ThreadPoolExecutor(max_workers=len(servers), thread_name_prefix="endpoint-check")
    futures = {key: pool.submit(_ask, openai_client(asker[key], first[key]), first[key],
                                deadline, within_s) for key in servers}
    wait(futures.values(), timeout=within_s + 0.5)
    pool.shutdown(wait=False, cancel_futures=True)
    problems = []
    for key, future in futures.items():
        answer = future.result() if future.done() else _silent(first[key], within_s)
        for model_name, names in servers[key].items():
            model = roles[names[0]]
            if isinstance(answer, tuple):  # the server itself: one problem for all its roles
                problems.append(EndpointProblem(
                    tuple(n for ns in servers[key].values() for n in ns), model, *answer))
                break
            if answer and model_name not in answer:
                problems.append(EndpointProblem(tuple(names), model, Fault.UNKNOWN_MODEL,
                                                _not_served(model, answer)))
    return tuple(problems)


def _silent(model: RoleModel, within_s: float) -> tuple[Fault, str]:
    return Fault.UNREACHABLE, f"no answer from {endpoint_of(model)} within {within_s:g} s"


def _ask(client: object, model: RoleModel, deadline: float,
         within_s: float) -> tuple[Fault, str] | Served:
    """The models the server lists (then, where it lists none, whether it has a chat endpoint),
    or what is wrong with it."""
    import openai

    try:
        listed = client.with_options(timeout=_left(deadline), max_retries=0)  # type: ignore[attr-defined]
        response = listed.models.with_raw_response.list()
        return _model_list(response.status_code, response.text, model)
    except (openai.APIConnectionError, openai.APIStatusError) as exc:
        if (fault := _server_fault(exc, model, within_s)) is not None:
            return fault
        if getattr(exc, "status_code", None) not in NO_ENDPOINT:
            return []  # a server error or a rate limit: the run's retries deal with those
    return _chat_endpoint(client, model, deadline, within_s)


def _chat_endpoint(client: object, model: RoleModel, deadline: float,
                   within_s: float) -> tuple[Fault, str] | Served:
    """A server that lists no models: is there an OpenAI chat endpoint at ``base_url``? A chat
    completion of no messages is refused by one (HTTP 400) without running the model."""
    import openai

    url = endpoint_of(model)
    try:
        chat = client.with_options(timeout=_left(deadline), max_retries=0)  # type: ignore[attr-defined]
        chat.chat.completions.with_raw_response.create(model=model.model, messages=[],
                                                       max_tokens=1)
    except (openai.APIConnectionError, openai.APIStatusError) as exc:
        if (fault := _server_fault(exc, model, within_s)) is not None:
            return fault
        status = getattr(exc, "status_code", None)
        if status in NO_ENDPOINT:
            return Fault.NOT_OPENAI, (
                f"{url} does not speak OpenAI's protocol: neither {url}/models nor "
                f"{url}/chat/completions exists there (HTTP {status}); the URL is the "
                f"server's OpenAI root, usually ending in /v1")
    return []


def _server_fault(exc: Exception, model: RoleModel, within_s: float) -> tuple[Fault, str] | None:
    """What a failed request says of the server whatever was asked: silent, unreachable, or
    refusing the key; None for any other HTTP status."""
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return _silent(model, within_s)
    if isinstance(exc, openai.APIConnectionError):
        return Fault.UNREACHABLE, f"cannot reach {endpoint_of(model)}: {_cause(exc)}"
    if getattr(exc, "status_code", None) in KEY_REFUSED:
        return Fault.KEY_REFUSED, _key_refused(exc, model)
    return None


def _model_list(status: int, text: str, model: RoleModel) -> tuple[Fault, str] | Served:
    """What ``GET /models`` answered with HTTP 2xx: a model list, else not OpenAI's protocol."""
    url = endpoint_of(model)
    try:
        return [str(entry["id"]) for entry in json.loads(text)["data"]]
    except (ValueError, KeyError, TypeError):
        return Fault.NOT_OPENAI, (
            f"{url} does not speak OpenAI's protocol: GET {url}/models answered HTTP {status} "
            f"with {_shown(text)}, not a model list; the URL is the server's OpenAI root, "
            f"usually ending in /v1")


def _not_served(model: RoleModel, served: Served) -> str:
    shown = ", ".join(served[:8]) + (f" and {len(served) - 8} more" if len(served) > 8 else "")
    return f"{endpoint_of(model)} does not serve model {model.model!r} (it serves: {shown})"


def _key_refused(exc: Exception, model: RoleModel) -> str:
    status = getattr(exc, "status_code", "")
    held = f"the key in ${model.api_key_env}" if model.api_key_env else "no key (api_key_env = \"\")"
    return f"{endpoint_of(model)} refused {held} (HTTP {status})"


def _cause(exc: BaseException) -> str:
    """The innermost reason of a connection error ("[Errno 111] Connection refused")."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return " ".join(str(exc).split())[:200] or type(exc).__name__


def _shown(text: str) -> str:
    flat = " ".join(text.split())
    return repr(flat[:60] + ("…" if len(flat) > 60 else "")) if flat else "an empty body"


def _left(deadline: float) -> float:
    return max(0.05, deadline - time.monotonic())
