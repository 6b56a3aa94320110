"""A chat client for one role over any OpenAI-compatible endpoint, through the openai package.

``ChatClient.ask(request, messages, parse)`` is one request: it retries the transport (rate
limits, server errors, timeouts, lost connections) with exponential backoff and jitter, and
re-asks the model, quoting what was wrong, when ``parse`` refuses its answer. Every attempt is
accounted for and traced in the lineage's ``Ledger``; no attempt starts once the lineage's
spending limit is reached.

The API key is read from the environment variable the settings name, once, when the client is
built; it lives only inside the openai client object (never in settings, logs or traces).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from .ledger import Ledger
from .settings import LLMSettings, RoleModel
from .trace import (
    CONNECTION_ERROR,
    MALFORMED,
    OK,
    RATE_LIMITED,
    REFUSED,
    SERVER_ERROR,
    TIMEOUT,
    LLMCall,
)

T = TypeVar("T")
CHARS_PER_TOKEN = 4  # for estimating tokens when a server reports no usage
NO_KEY = "unused"  # sent where the server needs no key (api_key_env = "")
REQUEST_HEADER = "X-Kernelswarm-Request"  # which request an answer is for; servers may ignore it


class LLMError(Exception):
    """A request that produced no usable answer: given up after retries, refused, or out of
    budget. ``kind`` is the last attempt's outcome (``budget`` for the spending limit)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class SpendLimitReached(LLMError):
    def __init__(self, reason: str) -> None:
        super().__init__("budget", reason)


class MalformedAnswer(ValueError):
    """An answer that does not follow the requested format; the message tells the model what
    to fix, precisely, and is sent back to it."""


class MissingAPIKey(ValueError):
    """The environment variable that should hold the API key is not set."""


def read_api_key(role: str, model: RoleModel) -> str:
    """The key from the variable ``model.api_key_env`` names (``NO_KEY`` where it names none)."""
    if not model.api_key_env:
        return NO_KEY
    key = os.environ.get(model.api_key_env, "")
    if not key:
        raise MissingAPIKey(
            f"agent.{role}: the API key variable {model.api_key_env} is not set in the process "
            f"that runs the lineage (on a Ray cluster: set it on every node before Ray starts); "
            f"for a server that needs no key, set api_key_env = \"\"")
    return key


def _classify(exc: Exception) -> tuple[str, float | None]:
    """The outcome of a failed attempt and the server's Retry-After, if it sent one."""
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return TIMEOUT, None
    if isinstance(exc, openai.APIConnectionError):
        return CONNECTION_ERROR, None
    if isinstance(exc, openai.APIStatusError):
        retry_after = None
        try:
            retry_after = float(exc.response.headers.get("retry-after", ""))
        except (TypeError, ValueError):
            pass
        if exc.status_code == 429:
            return RATE_LIMITED, retry_after
        if exc.status_code >= 500:
            return SERVER_ERROR, retry_after
        return REFUSED, None
    raise exc  # not a transport failure: a bug


def _describe_error(outcome: str, exc: Exception, model: RoleModel) -> str:
    if outcome == TIMEOUT:
        return f"no answer within {model.timeout_s:g} s"
    text = " ".join(str(exc).split())
    return text[:300]


def openai_client(role: str, model: RoleModel) -> Any:
    """An ``openai.OpenAI`` for this endpoint, with the key from the environment; retries are
    the ``ChatClient``'s, so the library's own are off."""
    try:
        import openai
    except ImportError as exc:  # pragma: no cover - openai is a core dependency
        raise ImportError("the LLM agent (kernelswarm.agents.llm) needs openai: "
                          "pip install 'openai>=1.0'") from exc
    return openai.OpenAI(api_key=read_api_key(role, model), base_url=model.base_url,
                         timeout=model.timeout_s, max_retries=0)


class ChatClient:
    """One role's client. Used by one lineage at a time.

    ``endpoint``: an ``openai_client`` to share between roles on the same server (building one
    costs a TLS context); by default the client builds its own.
    """

    def __init__(self, role: str, settings: LLMSettings, ledger: Ledger,
                 rng: random.Random | None = None,
                 sleep: Callable[[float], None] = time.sleep, endpoint: Any = None) -> None:
        self.role = role
        self.model = settings.roles[role]
        self.price = settings.price(self.model.model)
        self.ledger = ledger
        self.settings = settings
        self._rng = rng or random.Random()
        self._sleep = sleep
        self._openai = endpoint if endpoint is not None else openai_client(role, self.model)

    def __repr__(self) -> str:  # never shows the key
        return f"<ChatClient {self.role} {self.model.model} at {self.model.base_url or 'OpenAI'}>"

    def ask(self, request: str, messages: Sequence[Mapping[str, str]],
            parse: Callable[[str], T]) -> T:
        """``parse`` of the first answer it accepts; raises ``LLMError`` when none comes."""
        conversation = [dict(m) for m in messages]
        attempt = 0
        for reask in range(self.settings.max_format_retries + 1):
            call, attempt = self._answer(request, conversation, attempt)
            try:
                result = parse(call.answer)
            except MalformedAnswer as exc:
                last = reask == self.settings.max_format_retries
                self.ledger.record(replace(call, outcome=MALFORMED, error=str(exc), gave_up=last))
                if last:
                    raise LLMError(MALFORMED, f"{self.role}: {reask + 1} malformed answers in a "
                                              f"row; the last: {exc}") from None
                conversation += [
                    {"role": "assistant", "content": call.answer},
                    {"role": "user", "content": f"Your answer could not be used: {exc}\n"
                                                f"Answer again, complete, in the format asked."}]
                continue
            self.ledger.record(call)
            return result
        raise AssertionError("unreachable")

    def _answer(self, request: str, messages: list[dict[str, str]],
                attempt: int) -> tuple[LLMCall, int]:
        """One answer from the server, retrying the transport; the call is not yet recorded."""
        retries = 0
        while True:
            reason = self.ledger.stop_reason()
            if reason is not None:
                raise SpendLimitReached(reason)
            attempt += 1
            started, clock = time.time(), time.monotonic()
            try:
                response = self._openai.chat.completions.create(
                    model=self.model.model, messages=messages,
                    temperature=self.model.temperature, max_tokens=self.model.max_tokens,
                    extra_headers={REQUEST_HEADER: request})
            except Exception as exc:
                outcome, retry_after = _classify(exc)
                error = _describe_error(outcome, exc, self.model)
                last = outcome == REFUSED or retries >= self.model.max_retries
                self.ledger.record(LLMCall(
                    self.ledger.lineage, self.role, request, self.model.model, attempt, outcome,
                    tuple(messages), latency_s=time.monotonic() - clock, error=error,
                    started=started, gave_up=last))
                if last:
                    tries = f"{retries + 1} attempt{'s' if retries else ''}"
                    raise LLMError(outcome, f"{self.role} ({self.model.model}): {outcome} "
                                            f"after {tries}: {error}") from None
                self._sleep(self._backoff(retries, retry_after))
                retries += 1
                continue
            return self._call(request, messages, attempt, response, started,
                              time.monotonic() - clock), attempt

    def _backoff(self, retries: int, retry_after: float | None) -> float:
        """Exponential backoff with jitter (half to all of the step); at least Retry-After."""
        step = min(self.settings.backoff_max_s, self.settings.backoff_s * 2 ** retries)
        wait = step * (0.5 + 0.5 * self._rng.random())
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.settings.backoff_max_s))
        return wait

    def _call(self, request: str, messages: list[dict[str, str]], attempt: int, response: object,
              started: float, latency_s: float) -> LLMCall:
        choices = getattr(response, "choices", None) or []
        answer = (choices[0].message.content or "") if choices else ""
        usage = getattr(response, "usage", None)
        estimated = usage is None
        if usage is not None:
            prompt_tokens, completion_tokens = usage.prompt_tokens, usage.completion_tokens
        else:
            prompt_chars = sum(len(m["content"]) for m in messages)
            prompt_tokens = prompt_chars // CHARS_PER_TOKEN
            completion_tokens = len(answer) // CHARS_PER_TOKEN
        return LLMCall(self.ledger.lineage, self.role, request, self.model.model, attempt, OK,
                       tuple(messages), answer, prompt_tokens, completion_tokens,
                       self.price.cost(prompt_tokens, completion_tokens), latency_s,
                       started=started, estimated_tokens=estimated)
