"""What the scripted model answers: real C++ kernels for silu_and_mul, in the agent's format."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kernelswarm.agents.builtin import find_transformation

START = (Path(__file__).resolve().parents[3] / "experiments" / "tasks" / "silu_and_mul"
         / "silu_and_mul.cpp").read_text()


def _fast() -> str:
    source = START
    for name in ("fast_exp", "restrict"):
        source, _ = find_transformation("cpp", name).apply(source, {})
    return source


# Correct and faster: inline vectorisable exp, restrict pointers.
FAST = _fast()
# Does not compile: a statement without its semicolon.
BROKEN = START.replace("float g = gate[i];", "float g = gate[i]")
# Compiles, runs, and is wrong: the gate's activation is missing.
WRONG = START.replace("row[i] = g / (1.0f + expf(-g)) * up[i];", "row[i] = g * up[i];")


def kernel(source: str, knobs: Mapping[str, list[Any]] | None = None,
           summary: str = "a change") -> str:
    return (f"Here is the kernel.\n```cpp\n{source}```\n"
            f"```json\n{json.dumps({'knobs': dict(knobs or {}), 'summary': summary})}\n```\n")


def plan(move: str, rationale: str = "inline the exponential so the loop vectorises") -> str:
    return f"Plan.\n```json\n{json.dumps({'move': move, 'rationale': rationale})}\n```"


def analysis(bound: str = "memory") -> str:
    return ("```json\n" + json.dumps({"summary": "bandwidth-bound on every shape",
                                      "bottleneck": bound,
                                      "suggestion": "vectorise the row loop"}) + "\n```")


def checks(*items: Mapping[str, Any]) -> str:
    return "```json\n" + json.dumps({"checks": list(items)}) + "\n```"
