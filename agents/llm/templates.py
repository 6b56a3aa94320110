"""Prompt templates: one Markdown file per request, rendered with ``string.Template``.

A template holds a system part and a user part, each introduced by a line ``<!-- system -->`` or
``<!-- user -->`` (a file with neither is all user part). Placeholders are ``$name`` or
``${name}``; a literal dollar is ``$$``. The built-in templates live in ``prompts/`` beside this
module; a folder given as ``prompt_dir`` overrides them file by file (same names). A template
that uses a placeholder its request does not provide is refused when the roles are built,
naming the file and the placeholder.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from string import Template

BUILTIN_DIR = Path(__file__).with_name("prompts")
_MARKER = re.compile(r"^<!--\s*(system|user)\s*-->[ \t]*$", re.M)

# What each request's template may use.
PLACEHOLDERS: Mapping[str, frozenset[str]] = {
    "planner": frozenset({"task", "language", "kernel", "knob_conventions", "profile", "machine",
                          "history", "feedback", "elites", "stage", "moves", "answer_example"}),
    "coder": frozenset({"task", "language", "kernel", "knob_conventions", "profile", "machine",
                        "history", "feedback", "elites", "move", "rationale", "answer_example"}),
    "repair": frozenset({"task", "language", "kernel", "knob_conventions", "failure", "history",
                         "answer_example"}),
    "tester": frozenset({"task", "language", "max_checks", "answer_example"}),
    "analyst": frozenset({"task", "language", "kernel", "profile", "machine", "answer_example"}),
}


class TemplateError(ValueError):
    """A prompt template that cannot be used; the message names the file."""


@dataclass(frozen=True)
class PromptTemplate:
    request: str
    path: Path
    system: Template | None
    user: Template

    def render(self, values: Mapping[str, object]) -> list[dict[str, str]]:
        """The chat messages, placeholders filled from ``values``."""
        text = {k: str(v) for k, v in values.items()}
        messages = []
        if self.system is not None:
            messages.append({"role": "system", "content": self.system.substitute(text).strip()})
        messages.append({"role": "user", "content": self.user.substitute(text).strip()})
        return messages


def _parts(text: str, path: Path) -> tuple[str | None, str]:
    found = list(_MARKER.finditer(text))
    if not found:
        return None, text
    if text[:found[0].start()].strip():
        raise TemplateError(f"{path}: text before the first <!-- system --> / <!-- user --> line")
    parts: dict[str, str] = {}
    for i, match in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(text)
        if match.group(1) in parts:
            raise TemplateError(f"{path}: two <!-- {match.group(1)} --> parts")
        parts[match.group(1)] = text[match.end():end]
    if "user" not in parts:
        raise TemplateError(f"{path}: no <!-- user --> part")
    return parts.get("system"), parts["user"]


def _checked(text: str, request: str, path: Path) -> Template:
    template = Template(text)
    if not template.is_valid():
        raise TemplateError(f"{path}: a '$' that starts no placeholder (write $$ for a dollar)")
    unknown = sorted(set(template.get_identifiers()) - PLACEHOLDERS[request])
    if unknown:
        raise TemplateError(f"{path}: unknown placeholder(s) {', '.join('$' + u for u in unknown)}"
                            f"; a {request} template may use "
                            f"{', '.join('$' + p for p in sorted(PLACEHOLDERS[request]))}")
    return template


def load_template(request: str, prompt_dir: Path | None = None) -> PromptTemplate:
    """The template of ``request``: from ``prompt_dir`` where it has ``<request>.md``, else
    the built-in one."""
    path = BUILTIN_DIR / f"{request}.md"
    if prompt_dir is not None and (Path(prompt_dir) / f"{request}.md").is_file():
        path = Path(prompt_dir) / f"{request}.md"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TemplateError(f"{path}: cannot be read: {exc}") from None
    system, user = _parts(text, path)
    return PromptTemplate(request, path,
                          _checked(system, request, path) if system is not None else None,
                          _checked(user, request, path))


def load_templates(prompt_dir: Path | None = None) -> dict[str, PromptTemplate]:
    """Every request's template; raises ``TemplateError`` on the first bad one."""
    if prompt_dir is not None and not Path(prompt_dir).is_dir():
        raise TemplateError(f"{prompt_dir}: the prompt folder does not exist")
    return {request: load_template(request, prompt_dir) for request in PLACEHOLDERS}
