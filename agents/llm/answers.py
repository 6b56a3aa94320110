"""Strict reading of the models' answers.

Every answer carries its payload in fenced blocks: a kernel in a code block (or a ``diff``
block against the current kernel) and a ``json`` block for the structured part (a plan, knobs,
checks, an analysis). What does not follow the format raises ``MalformedAnswer`` with a message
that says precisely what to fix; the client sends it back to the model and asks again.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernelswarm.agents.builtin.clike import SourceError, extern_c_functions
from kernelswarm.search import (
    ADOPT,
    BOUNDS,
    REWRITE,
    SPECS,
    STOP,
    TUNE,
    Candidate,
    Check,
    Plan,
    Syntax,
    Task,
)

from .client import MalformedAnswer

LLM_MOVE = "llm:"  # prefix of a move the LLM coder realises: "llm:<short name>"
_MOVE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,47}")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)[^\n]*\n(.*?)^[ \t]*```[ \t]*$", re.M | re.S)
MAX_KNOB_VALUES = 16
MAX_CHECKS = 8
MAX_SCALE = 1e4


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """``(tag, body)`` of every fenced block, in order; tags lower-cased."""
    return [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(text)]


def json_block(text: str, example: str) -> dict[str, Any]:
    """The answer's one ``json`` block, as an object."""
    blocks = [body for tag, body in fenced_blocks(text) if tag == "json"]
    if not blocks:
        raise MalformedAnswer(f"there is no ```json block; put the structured part of your "
                              f"answer in one, e.g.\n```json\n{example}\n```")
    if len(blocks) > 1:
        raise MalformedAnswer(f"there are {len(blocks)} ```json blocks; give exactly one")
    try:
        value = json.loads(blocks[0])
    except json.JSONDecodeError as exc:
        raise MalformedAnswer(f"the ```json block is not valid JSON: {exc.msg} at line "
                              f"{exc.lineno} column {exc.colno}") from None
    if not isinstance(value, dict):
        raise MalformedAnswer(f"the ```json block must hold an object {{...}}, not a "
                              f"{type(value).__name__}")
    return value


def _text_field(data: Mapping[str, Any], key: str, required: bool = True) -> str:
    value = data.get(key, "")
    if not isinstance(value, str) or (required and not value.strip()):
        raise MalformedAnswer(f"\"{key}\" must be a non-empty string")
    return value.strip()


# ---------------------------------------------------------------------------------------------
# plans

@dataclass(frozen=True)
class MoveChoice:
    """The moves a planner may choose from at one step."""

    rewrites: tuple[str, ...]  # names of built-in transformations for the language
    can_tune: bool
    can_adopt: bool

    def allowed(self) -> str:
        moves = [f'"{LLM_MOVE}<short-name>"']
        moves += [f'"{TUNE}"'] * self.can_tune + [f'"{ADOPT}"'] * self.can_adopt
        moves += [f'"{REWRITE}{name}"' for name in self.rewrites] + [f'"{STOP}"']
        return ", ".join(moves)


PLAN_EXAMPLE = '{"move": "llm:vectorise-rows", "rationale": "what to change and why"}'


def parse_plan(text: str, choice: MoveChoice) -> Plan:
    data = json_block(text, PLAN_EXAMPLE)
    move = data.get("move")
    if not isinstance(move, str) or not move:
        raise MalformedAnswer(f"\"move\" must be one of {choice.allowed()}")
    move = move.strip()
    rationale = data.get("rationale", "")
    if not isinstance(rationale, str):
        raise MalformedAnswer("\"rationale\" must be a string")
    if move.startswith(LLM_MOVE):
        name = move[len(LLM_MOVE):]
        if not _MOVE_NAME.fullmatch(name):
            raise MalformedAnswer(f"the name in {move!r} must be 1-48 characters of a-z, 0-9, "
                                  f"'-' and '_', starting with a letter or digit")
        if not rationale.strip():
            raise MalformedAnswer(f"a {LLM_MOVE} move needs a \"rationale\": the change to make, "
                                  f"concrete enough for the coder to write it")
        return Plan(move, rationale.strip())
    if move == TUNE and not choice.can_tune:
        raise MalformedAnswer("\"tune\" is not possible: the current kernel has no knobs")
    if move == ADOPT and not choice.can_adopt:
        raise MalformedAnswer("\"adopt\" is not possible: no other lineage has a better kernel")
    if move.startswith(REWRITE) and move[len(REWRITE):] not in choice.rewrites:
        raise MalformedAnswer(f"{move!r} names no built-in transformation; those available: "
                              f"{', '.join(choice.rewrites) or 'none'}")
    if move not in (TUNE, ADOPT, STOP) and not move.startswith(REWRITE):
        raise MalformedAnswer(f"unknown move {move!r}; allowed: {choice.allowed()}")
    return Plan(move, rationale.strip())


# ---------------------------------------------------------------------------------------------
# kernels

KERNEL_EXAMPLE = '{"knobs": {"BLOCK": [256, 128, 512]}, "summary": "what changed"}'


@dataclass(frozen=True)
class KernelAnswer:
    source: str
    knob_space: dict[str, tuple[Any, ...]]
    summary: str


def apply_diff(source: str, diff: str) -> str:
    """Apply a unified diff's hunks to ``source``, each located by its old lines."""
    hunks: list[list[str]] = []
    for line in diff.splitlines():
        if line.startswith("@@"):
            hunks.append([])
        elif line.startswith(("---", "+++")) and not hunks:
            continue
        elif hunks and line[:1] in (" ", "-", "+", ""):
            hunks[-1].append(line if line else " ")
    if not hunks:
        raise MalformedAnswer("the ```diff block has no hunk (a line starting with @@)")
    result = source
    for number, hunk in enumerate(hunks, 1):
        old = "\n".join(line[1:] for line in hunk if line[0] in " -")
        new = "\n".join(line[1:] for line in hunk if line[0] in " +")
        found = result.count(old) if old else 0
        if found != 1:
            where = "is not in" if found == 0 else f"occurs {found} times in"
            raise MalformedAnswer(f"hunk {number} of the diff does not apply: its old lines "
                                  f"(context and '-' lines) {where} the current kernel; copy "
                                  f"them exactly, with enough context to be unique, or send "
                                  f"the whole kernel instead")
        result = result.replace(old, new, 1)
    return result


def _entry_points(parent: Candidate) -> list[str]:
    """The functions the task's launcher may call: the entry and, for C-like kernels, every
    function the parent gives C linkage."""
    names = [parent.entry]
    if SPECS[parent.language].syntax is Syntax.CPP:
        try:
            names += [f.name for f in extern_c_functions(parent.source)]
        except SourceError:
            pass
    return list(dict.fromkeys(names))


def _knob_space(raw: Any, source: str) -> dict[str, tuple[Any, ...]]:
    if not isinstance(raw, dict):
        raise MalformedAnswer("\"knobs\" must be an object {NAME: [values...]}, {} for none")
    space = {}
    for name, values in raw.items():
        if not _IDENTIFIER.fullmatch(name):
            raise MalformedAnswer(f"knob name {name!r} is not an identifier")
        if not isinstance(values, list) or not 1 <= len(values) <= MAX_KNOB_VALUES:
            raise MalformedAnswer(f"knob {name}: give a list of 1 to {MAX_KNOB_VALUES} values, "
                                  f"the first being the default")
        if any(isinstance(v, bool) or not isinstance(v, (int, float, str)) for v in values) \
                or len(set(map(repr, values))) != len(values):
            raise MalformedAnswer(f"knob {name}: values must be distinct numbers or words")
        if not re.search(rf"\b{re.escape(name)}\b", source):
            raise MalformedAnswer(f"knob {name} is declared but the kernel never uses it")
        space[name] = tuple(values)
    return space


def parse_kernel(text: str, parent: Candidate) -> KernelAnswer:
    """A whole kernel (a code block) or a diff against ``parent``, plus its knobs (json)."""
    blocks = fenced_blocks(text)
    tags = SPECS[parent.language].fence_tags
    code = [body for tag, body in blocks if tag in tags]
    diffs = [body for tag, body in blocks if tag in ("diff", "patch")]
    if len(code) + len(diffs) != 1:
        found = "none" if not code and not diffs else f"{len(code) + len(diffs)}"
        raise MalformedAnswer(f"give exactly one kernel: one ```{tags[0]} block with the whole "
                              f"file, or one ```diff block against the current kernel; found "
                              f"{found}")
    source = code[0] if code else apply_diff(parent.source, diffs[0])
    if not source.endswith("\n"):
        source += "\n"
    data = json_block(text, KERNEL_EXAMPLE)
    if "knobs" not in data:
        raise MalformedAnswer("the ```json block needs \"knobs\": {NAME: [values...]}, {} "
                              "for a kernel without knobs")
    space = _knob_space(data["knobs"], source)
    for name in _entry_points(parent):
        if not re.search(rf"\b{re.escape(name)}\s*\(", source):
            raise MalformedAnswer(f"the kernel must still define `{name}` with the calling "
                                  f"contract of the current kernel")
    if source == parent.source and space == parent.space:
        raise MalformedAnswer("the kernel is the same as the current one: change something")
    summary = data.get("summary", "")
    return KernelAnswer(source, space, summary if isinstance(summary, str) else "")


# ---------------------------------------------------------------------------------------------
# checks

CHECKS_EXAMPLE = ('{"checks": [{"shape": {"tokens": 1, "d": 7, "dtype": "float32"}, '
                  '"scale": 1.0, "reason": "a row shorter than a vector"}]}')


def _dimension_bounds(task: Task) -> dict[str, int]:
    """Largest sizes a check may have: four times the tuning shapes' (the held-out shapes are
    not used: a bound quoted back to the model would give their sizes away)."""
    bounds: dict[str, int] = {}
    for shape in task.tuning_shapes:
        for key, value in shape.pairs:
            if isinstance(value, int) and not isinstance(value, bool):
                bounds[key] = max(bounds.get(key, 1), 4 * value)
    return bounds


def _check(item: Any, index: int, task: Task, bounds: Mapping[str, int]) -> Check:
    where = f"checks[{index}]"
    if not isinstance(item, dict) or not isinstance(item.get("shape"), dict):
        raise MalformedAnswer(f"{where} must be an object with a \"shape\" object")
    shape = item["shape"]
    keys = sorted(task.tuning_shapes[0])
    if sorted(shape) != keys:
        raise MalformedAnswer(f"{where}.shape must have exactly the keys {', '.join(keys)}; "
                              f"got {', '.join(sorted(shape)) or 'none'}")
    for key in keys:
        value = shape[key]
        if key == "dtype":
            dtypes = sorted({s["dtype"] for s in task.tuning_shapes})
            if value not in dtypes:
                raise MalformedAnswer(f"{where}.shape.dtype must be one of the task's dtypes "
                                      f"here, {', '.join(dtypes)}; got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, int) \
                or not 1 <= value <= bounds.get(key, 1):
            raise MalformedAnswer(f"{where}.shape.{key} must be an integer from 1 to "
                                  f"{bounds.get(key, 1)}; got {value!r}")
    scale = item.get("scale", 1.0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) \
            or not (math.isfinite(scale) and 0 < scale <= MAX_SCALE):
        raise MalformedAnswer(f"{where}.scale must be a number in (0, {MAX_SCALE:g}]")
    reason = item.get("reason", "")
    return Check(dict(shape), float(scale), reason if isinstance(reason, str) else "")


def parse_checks(text: str, task: Task) -> tuple[Check, ...]:
    data = json_block(text, CHECKS_EXAMPLE)
    checks = data.get("checks")
    if not isinstance(checks, list) or len(checks) > MAX_CHECKS:
        raise MalformedAnswer(f"\"checks\" must be a list of at most {MAX_CHECKS} checks")
    bounds = _dimension_bounds(task)
    unique: dict[str, Check] = {}
    for i, item in enumerate(checks):
        check = _check(item, i, task, bounds)
        unique.setdefault(check.label, check)
    return tuple(unique.values())


# ---------------------------------------------------------------------------------------------
# analyses

BOTTLENECKS = BOUNDS  # the analyst's answer becomes ``Facts.bound``
ANALYSIS_EXAMPLE = ('{"summary": "two sentences on the profile", "bottleneck": "memory", '
                    '"suggestion": "the next change worth trying"}')


@dataclass(frozen=True)
class Analysis:
    summary: str
    bottleneck: str
    suggestion: str


def parse_analysis(text: str) -> Analysis:
    data = json_block(text, ANALYSIS_EXAMPLE)
    summary = _text_field(data, "summary")
    bottleneck = data.get("bottleneck")
    if bottleneck not in BOTTLENECKS:
        raise MalformedAnswer(f"\"bottleneck\" must be one of {', '.join(BOTTLENECKS)}")
    return Analysis(summary, bottleneck, _text_field(data, "suggestion", required=False))
