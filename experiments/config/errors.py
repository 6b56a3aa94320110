"""Validation errors of the configuration, as a user reads them: one line per key, naming the
key and what it allows; a value under ``api_key_env`` is never quoted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError


def _table(model: type[BaseModel], name: str) -> type[BaseModel] | None:
    """The model of table ``name`` of ``model``, None where ``name`` is a value or no key."""
    field = model.model_fields.get(name)
    if field is None or not isinstance(field.annotation, type) or \
            not issubclass(field.annotation, BaseModel):
        return None
    return field.annotation


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    for part in loc[:-1]:
        table = _table(model, str(part))
        if table is None:
            return []
        model = table
    return sorted(model.model_fields)


def _key(schema: type[BaseModel], loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """The key an error's location names: down the tables to the key itself, without what
    pydantic adds below a key (a union's branch, a list's index)."""
    model: type[BaseModel] | None = schema
    for depth, part in enumerate(loc):
        if model is None or str(part) not in model.model_fields:
            return loc[:max(depth, 1)]
        model = _table(model, str(part))
    return loc


def _shown(value: Any) -> Any:
    """A value as an error quotes it, minus whatever is under ``api_key_env`` (a key pasted
    there by mistake must not reach a terminal or a log)."""
    if isinstance(value, BaseModel):
        value = value.model_dump(exclude_none=True)
    if isinstance(value, dict):
        return {k: "<withheld>" if k == "api_key_env" else _shown(v) for k, v in value.items()}
    return value


def _override_of(key: str, overrides: Mapping[str, str]) -> str | None:
    """The ``--set`` item that wrote ``key`` (or a key under it, or the table above it), as
    typed unless it holds ``api_key_env``."""
    for dotted, item in overrides.items():
        if dotted == key or dotted.startswith(key + ".") or key.startswith(dotted + "."):
            return f"{dotted}=<withheld>" if "api_key_env" in item else item
    return None


def describe(error: ValidationError, schema: type[BaseModel], where: str,
             overrides: Mapping[str, str] | None = None) -> str:
    """A validation error as a user reads it: one line per key, naming it and what is
    allowed. ``where`` is the file (or sweep cell) the configuration came from; ``overrides``
    maps the dotted keys set with ``--set`` to the item as typed, so that a bad override is
    named as the user wrote it rather than blamed on the file."""
    overrides = overrides or {}
    problems: dict[str, list[str]] = {}
    for item in error.errors():
        # The whole path in [agent], whose tables nest (agent.coder.model, agent.prices.<model>).
        loc = tuple(item["loc"])
        if loc[:1] != ("agent",):
            loc = loc if item["type"] == "extra_forbidden" else _key(schema, loc)
        key = ".".join(str(p) for p in loc) or "(top level)"
        if item["type"] == "extra_forbidden":
            allowed = ", ".join(_allowed_keys(schema, loc))
            problems.setdefault(key, []).append(f"unknown key; allowed here: {allowed}")
        else:
            message = item["msg"].removeprefix("Value error, ")
            shown = "<withheld>" if "api_key_env" in loc else _shown(item.get("input"))
            problems.setdefault(key, []).append(message if not loc else f"{message} (got {shown!r})")
    lines, from_file = [], False
    for key, msgs in problems.items():
        override = _override_of(key, overrides) if key != "(top level)" else None
        from_file |= override is None
        if override is not None:
            lines.append(f"--set {override}: {key}: {' or '.join(msgs)}")
        elif key != "(top level)":
            lines.append(f"{key}: {' or '.join(msgs)}")
        else:  # a problem of the whole configuration (sections disagreeing) names its keys
            lines.append(" or ".join(msgs))
    head = f"{where}: invalid configuration" if from_file else "invalid --set override"
    return f"{head}:\n  " + "\n  ".join(lines)
