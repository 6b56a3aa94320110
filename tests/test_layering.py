"""The layering rules of docs/architecture.md, checked on the source."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("search", "agents", "evaluators", "cluster", "experiments")
# Which layer may import each outside package (task files may import torch too).
ONLY = {"ray": "cluster", "openai": "agents", "mlflow": "experiments"}
TORCH_LIKE = {"torch", "triton", "cuda", "cupy"}
BELOW = {layer: set(LAYERS[:i]) for i, layer in enumerate(LAYERS)}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def _files(layer: str) -> list[Path]:
    return [p for p in (ROOT / layer).rglob("*.py") if "tasks" not in p.relative_to(ROOT).parts]


@pytest.mark.parametrize("layer", LAYERS)
def test_layer_imports(layer):
    problems = []
    for path in _files(layer):
        for name in _imports(path):
            top = name.split(".")[0]
            if top in LAYERS:
                problems.append(f"{path}: bare import of {name!r}; use kernelswarm.{name}")
            if top in ONLY and ONLY[top] != layer:
                problems.append(f"{path}: imports {top}, which only {ONLY[top]}/ may")
            if top in TORCH_LIKE and layer != "evaluators":
                problems.append(f"{path}: imports {top}, which only evaluators/ may")
            if top == "kernelswarm":
                target = name.split(".")[1] if "." in name else ""
                if target in LAYERS and target != layer and target not in BELOW[layer]:
                    problems.append(f"{path}: imports {name}, a layer above {layer}/")
    assert not problems, "\n".join(problems)
