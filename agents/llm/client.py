"""A chat client for one role over any OpenAI-compatible endpoint, through the openai package.

``ChatClient.ask(request, messages, parse)`` is one request: it retries the transport (rate
limits, server errors, timeouts, lost connections) with exponential backoff and jitter, and
re-asks the model, quoting what was wrong, when ``parse`` refuses its answer. Every attempt is
accounted for and traced in the lineage's ``Ledger``.

Limits that hold whatever the server does:

- money and tokens: an attempt starts only if the ledger can reserve its worst case (its prompt
  at one token per byte, plus ``max_tokens`` of answer, at the model's price) within the
  lineage's limit; an answer whose usage exceeds what the request allowed is refused (not used,
  charged the reservation) and its endpoint is not asked again by the lineage;
- time: an attempt waits at most ``min(timeout_s, time left before the ledger's deadline)``;
  retries and their back-off stop at the deadline.

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

from .ledger import Ledger, Waiting
from .settings import LLMSettings, RoleModel
from .trace import (
    CONNECTION_ERROR,
    MALFORMED,
    OK,
    OVERSIZED,
    RATE_LIMITED,
    REFUSED,
    SERVER_ERROR,
    TIMEOUT,
    LLMCall,
)

T = TypeVar("T")
CHARS_PER_TOKEN = 4  # for estimating tokens when a server reports no usage
MESSAGE_TOKENS = 8  # the chat format's tokens around each message (4 for OpenAI's), bounded
MAX_REFUSED_CHARS = 4000  # of an oversized answer, kept in the trace
OPENAI_URL = "https://api.openai.com/v1"
NO_KEY = "unused"  # sent where the server needs no key (api_key_env = "")
REQUEST_HEADER = "X-Kernelswarm-Request"  # which request an answer is for; servers may ignore it


class LLMError(Exception):
    """A request that produced no usable answer: given up after retries, refused, out of budget
    or out of time. ``kind`` is the last attempt's outcome (``budget`` for the spending limit,
    ``deadline`` for the wall-time budget). The message is one line."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(" ".join(message.split()))
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


def endpoint_of(model: RoleModel) -> str:
    """The server a role's requests go to, as errors name it."""
    return model.base_url or OPENAI_URL


def _describe_error(outcome: str, exc: Exception, model: RoleModel, timeout_s: float,
                    cut: str) -> str:
    """The failure in one line; ``cut``: the deadline that shortened the attempt, if one did."""
    if outcome == TIMEOUT:
        why = f" ({cut} ended)" if cut else ""
        return f"no answer within {timeout_s:.3g} s from {endpoint_of(model)}{why}"
    text = " ".join(str(exc).split())[:300]
    if outcome == CONNECTION_ERROR:
        return f"{text} (endpoint {endpoint_of(model)})"
    return text


def prompt_bound(messages: Sequence[Mapping[str, str]]) -> int:
    """At least the prompt's tokens: one per byte (no tokenizer of a current model makes more)
    plus the chat format's few per message."""
    return sum(len(str(m.get("content", "")).encode()) + MESSAGE_TOKENS for m in messages) \
        + MESSAGE_TOKENS


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
        self._endpoint = f"{self.model.model} at {endpoint_of(self.model)}"

    def __repr__(self) -> str:  # never shows the key
        return f"<ChatClient {self.role} {self.model.model} at {self.model.base_url or 'OpenAI'}>"

    def ask(self, request: str, messages: Sequence[Mapping[str, str]],
            parse: Callable[[str], T]) -> T:
        """``parse`` of the first answer it accepts; raises ``LLMError`` when none comes."""
        conversation = [dict(m) for m in messages]
        attempt = 0
        since = time.time()
        try:
            for reask in range(self.settings.max_format_retries + 1):
                call, attempt = self._answer(request, conversation, attempt, since)
                try:
                    result = parse(call.answer)
                except MalformedAnswer as exc:
                    last = reask == self.settings.max_format_retries
                    self.ledger.record(replace(call, outcome=MALFORMED, error=str(exc),
                                               gave_up=last))
                    if last:
                        raise LLMError(MALFORMED, f"{self.role}: {reask + 1} malformed answers "
                                                  f"in a row; the last: {exc}") from None
                    conversation += [
                        {"role": "assistant", "content": call.answer},
                        {"role": "user", "content": f"Your answer could not be used: {exc}\n"
                                                    f"Answer again, complete, in the format asked."}]
                    continue
                self.ledger.record(call)
                return result
        finally:
            self.ledger.waiting(None)
        raise AssertionError("unreachable")

    def _attempts(self) -> int:
        return self.model.max_retries + 1

    def _may_start(self, request: str, messages: list[dict[str, str]]) -> tuple[int, float]:
        """The attempt's reservation (tokens, dollars); raises when it must not start."""
        closed = self.ledger.closed(self._endpoint)
        if closed is not None:  # perhaps closed by another role's request: that one is named
            raise LLMError(OVERSIZED, f"{self.role}: no request sent, after {closed}")
        left = self.ledger.time_left()
        if left is not None and left <= 0:
            raise LLMError("deadline", f"{self.role}: {self.ledger.deadline_name} has ended")
        prompt = prompt_bound(messages)
        worst = (prompt + self.model.max_tokens,
                 self.price.cost(prompt, self.model.max_tokens))
        reason = self.ledger.reserve(*worst, f"a {request} request")
        if reason is not None:
            raise SpendLimitReached(reason)
        return worst

    def _answer(self, request: str, messages: list[dict[str, str]], attempt: int,
                since: float) -> tuple[LLMCall, int]:
        """One answer from the server, retrying the transport; the call is not yet recorded
        (an oversized answer is recorded here, and raises)."""
        retries = 0
        while True:
            reserved = self._may_start(request, messages)
            attempt += 1
            self.ledger.waiting(Waiting(self.role, request, since, retries + 1,
                                        self._attempts()))
            left = self.ledger.time_left()
            timeout_s = self.model.timeout_s if left is None else min(self.model.timeout_s, left)
            started, clock = time.time(), time.monotonic()
            try:
                response = self._openai.chat.completions.create(
                    model=self.model.model, messages=messages,
                    temperature=self.model.temperature, max_tokens=self.model.max_tokens,
                    extra_headers={REQUEST_HEADER: request}, timeout=timeout_s)
            except Exception as exc:
                self.ledger.release(*reserved)
                outcome, retry_after = _classify(exc)
                cut = self.ledger.deadline_name if timeout_s < self.model.timeout_s else ""
                error = _describe_error(outcome, exc, self.model, timeout_s, cut)
                wait, left = self._backoff(retries, retry_after), self.ledger.time_left()
                out_of_time = left is not None and left <= wait  # no time for another attempt
                last = outcome == REFUSED or retries >= self.model.max_retries or out_of_time
                self.ledger.record(LLMCall(
                    self.ledger.lineage, self.role, request, self.model.model, attempt, outcome,
                    tuple(messages), latency_s=time.monotonic() - clock, error=error,
                    started=started, gave_up=last))
                if last:
                    tries = f"{retries + 1} attempt{'s' if retries else ''}"
                    raise LLMError("deadline" if out_of_time and outcome != REFUSED else outcome,
                                   f"{self.role} ({self.model.model}): {outcome} after {tries}: "
                                   f"{error}") from None
                self._sleep(wait)
                retries += 1
                continue
            call = self._call(request, messages, attempt, response, started,
                              time.monotonic() - clock, reserved)
            self.ledger.release(*reserved)
            if call.outcome == OVERSIZED:
                self.ledger.record(call)
                self.ledger.close(self._endpoint, f"the {self.role}'s {request} request: "
                                                  f"{call.error}")
                raise LLMError(OVERSIZED, f"{self.role}: {call.error}")
            return call, attempt

    def _backoff(self, retries: int, retry_after: float | None) -> float:
        """Exponential backoff with jitter (half to all of the step); at least Retry-After."""
        step = min(self.settings.backoff_max_s, self.settings.backoff_s * 2 ** retries)
        wait = step * (0.5 + 0.5 * self._rng.random())
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.settings.backoff_max_s))
        return wait

    def _call(self, request: str, messages: list[dict[str, str]], attempt: int, response: object,
              started: float, latency_s: float, reserved: tuple[int, float]) -> LLMCall:
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
        bound = prompt_bound(messages)
        if completion_tokens > self.model.max_tokens or prompt_tokens > bound:
            # The server did not keep to the request: its answer is not used, and the call is
            # charged what the request allowed, so the lineage's limit still holds.
            error = (f"the server ({self._endpoint}) answered with {prompt_tokens:,} prompt and "
                     f"{completion_tokens:,} completion tokens"
                     f"{' (estimated from the text)' if estimated else ''}, more than the request "
                     f"allowed (max_tokens {self.model.max_tokens:,}); the answer was refused, "
                     f"charged ${reserved[1]:.4f} (the request's worst case), and this lineage "
                     f"sends it no further request")
            return LLMCall(self.ledger.lineage, self.role, request, self.model.model, attempt,
                           OVERSIZED, tuple(messages), answer[:MAX_REFUSED_CHARS],
                           min(prompt_tokens, bound), self.model.max_tokens, reserved[1],
                           latency_s, error, started, estimated, gave_up=True,
                           reported_completion_tokens=completion_tokens)
        return LLMCall(self.ledger.lineage, self.role, request, self.model.model, attempt, OK,
                       tuple(messages), answer, prompt_tokens, completion_tokens,
                       self.price.cost(prompt_tokens, completion_tokens), latency_s,
                       started=started, estimated_tokens=estimated)
