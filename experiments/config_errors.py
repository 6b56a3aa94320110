"""Validation errors of the configuration, as a user reads them: one line per key, naming the
key and what it allows; a value under ``api_key_env`` is never quoted."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        if field is None or not isinstance(field.annotation, type) or not issubclass(field.annotation, BaseModel):
            return []
        model = field.annotation
    return sorted(model.model_fields)


def _shown(value: Any) -> Any:
    """A value as an error quotes it, minus whatever is under ``api_key_env`` (a key pasted
    there by mistake must not reach a terminal or a log)."""
    if isinstance(value, BaseModel):
        value = value.model_dump(exclude_none=True)
    if isinstance(value, dict):
        return {k: "<withheld>" if k == "api_key_env" else _shown(v) for k, v in value.items()}
    return value


def describe(error: ValidationError, schema: type[BaseModel]) -> str:
    """A validation error as a user reads it: one line per key, naming it and what is
    allowed."""
    problems: dict[str, list[str]] = {}
    for item in error.errors():
        # A union's branches add their type to the location; the key is section.field, or the
        # whole path in [agent], whose tables nest (agent.coder.model, agent.prices.<model>).
        loc = tuple(item["loc"] if item["loc"][:1] == ("agent",) else item["loc"][:2])
        key = ".".join(str(p) for p in loc) or "(top level)"
        if item["type"] == "extra_forbidden":
            allowed = ", ".join(_allowed_keys(schema, loc))
            problems.setdefault(key, []).append(f"unknown key; allowed here: {allowed}")
        else:
            message = item["msg"].removeprefix("Value error, ")
            shown = "<withheld>" if "api_key_env" in loc else _shown(item.get("input"))
            problems.setdefault(key, []).append(message if not loc else f"{message} (got {shown!r})")
    # A problem of the whole configuration (two sections disagreeing) names its keys itself.
    lines = [f"{key}: {' or '.join(msgs)}" if key != "(top level)" else " or ".join(msgs)
             for key, msgs in problems.items()]
    return "invalid configuration:\n  " + "\n  ".join(lines)
