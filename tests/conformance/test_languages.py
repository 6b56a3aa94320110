"""One behaviour suite over every kernel language (``search.SPECS``), as Optuna runs one storage
suite over every storage backend.

For each language, on the built-in task's starting kernel and with the real compilers (g++,
NVRTC, NVRTC with CUTLASS's headers, load_inline, Triton): it builds; it loads and launches through the task's launcher and is
correct on every shape; knob values change the built binary; a file with its knob values baked
in (``self_contained_source``, what ``candidates/`` and ``best/`` hold) builds alone; a cheat is
rejected before it builds; a compile error comes back with the compiler's message; a kernel
that writes nothing is INCORRECT. Steps that need a GPU skip with the reason on a machine
without one; NVRTC builds run on a CPU-only machine.

A language joins by adding a ``Case`` to ``CASES``; ``test_every_language_has_a_case`` fails
until it does. A torch-ext build takes about 30 s on a CPU (load_inline): the steps that build
variants of their own are marked slow for it, and the starting extension's build is shared with
the session's other torch-ext tests through the session's compile cache.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator
from kernelswarm.evaluators.languages import get_language
from kernelswarm.evaluators.languages.compile_cache import Build, CompileCache
from kernelswarm.evaluators.languages.cute import cutlass_include_dir
from kernelswarm.evaluators.languages.nvrtc import read_artifact
from kernelswarm.experiments.sinks.sources import self_contained_source
from kernelswarm.search import SPECS, Candidate, Evaluation, Status, Syntax
from tests.conftest import SILU_TASK

UNDECLARED = "ks_undeclared_name"  # what the broken variants call; compilers name it back


@dataclass(frozen=True)
class Case:
    """How the suite exercises one language."""

    task: Path  # a task with a starting kernel in this language
    device: str  # the device kind it is judged on
    cheat: str  # a first line the static screen refuses ...
    cheat_rule: str  # ... under this rule
    broken: str  # a first part the compiler refuses, naming UNDECLARED
    probe: str = ""  # for a starting kernel without knobs: a knob KS_PROBE that reaches the code
    baked_same_binary: bool = True  # the baked file builds the machine code the knobs built
    slow_builds: bool = False  # each variant's build takes long (marked slow)


_MACRO_PROBE = ('\n#ifndef KS_PROBE\n#define KS_PROBE 3\n#endif\n'
                'extern "C" int ks_probe(void) { return KS_PROBE; }\n')

CASES = {
    "cpp": Case(SILU_TASK, "cpu", "#include <thread>\n", "threads",
                f'extern "C" void ks_broken(void) {{ {UNDECLARED}(); }}\n', probe=_MACRO_PROBE),
    "cuda": Case(SILU_TASK, "cuda", "cudaStream_t ks_side;\n", "streams and events",
                 f'extern "C" __global__ void ks_broken() {{ {UNDECLARED}(); }}\n'),
    # The extension's module name is its cache key, so the baked file's binary differs by name.
    # A missing header is fatal to g++: it stops right after the torch headers load_inline puts
    # first, instead of compiling the whole extension.
    "torch-ext": Case(SILU_TASK, "cpu", "#include <thread>\n", "threads",
                      f"#include <{UNDECLARED}.h>\n", probe=_MACRO_PROBE,
                      baked_same_binary=False, slow_builds=True),
    # The artifact is the source and its knob values, so the baked file is another artifact.
    "triton": Case(SILU_TASK, "cpu", "import os\n", "imports",
                   f"def {UNDECLARED}(:\n    pass\n", baked_same_binary=False),
    # CuTe is device code: it may not bring PyTorch's headers (nor any host library).
    "cute": Case(SILU_TASK, "cuda", "#include <ATen/ATen.h>\n", "PyTorch, Python or host code",
                 f'extern "C" __global__ void ks_broken() {{ cute::{UNDECLARED}(); }}\n'),
}

GPU_REASON = None if torch.cuda.is_available() else "no NVIDIA GPU visible to torch"
NVRTC_REASON = (None if importlib.util.find_spec("cuda") is not None
                and importlib.util.find_spec("cuda.core") is not None
                else "NVRTC through cuda.core is not installed (pip install cuda-core "
                     "cuda-bindings nvidia-cuda-nvrtc)")


def _cutlass_reason() -> str | None:
    try:
        cutlass_include_dir()
    except RuntimeError as exc:
        return str(exc)
    return None


# What each NVRTC-built language needs before it can build at all (a GPU is not among them).
MISSING = {"cuda": NVRTC_REASON, "cute": NVRTC_REASON or _cutlass_reason()}


def _params(*, runs: bool = False, builds: bool = False) -> list:
    """One parameter per language, with the marks and skips the step needs: ``builds`` for a
    step that builds variants of its own (slow where a build is), ``runs`` for one that runs
    the kernel (a GPU for cuda)."""
    params = []
    for name, case in CASES.items():
        marks = [pytest.mark.slow] if builds and case.slow_builds else []
        if MISSING.get(name):
            marks.append(pytest.mark.skip(reason=MISSING[name]))
        if runs and case.device == "cuda":
            marks.append(pytest.mark.gpu)
        params.append(pytest.param(name, marks=marks, id=name))
    return params


def test_every_language_has_a_case():
    assert set(CASES) == set(SPECS), "a language in SPECS without a conformance case (or back)"


@pytest.mark.parametrize("name", list(SPECS))
def test_each_implementation_is_described_by_its_spec(name):
    implementation = get_language(name)
    assert implementation.language_spec is SPECS[name]
    assert (implementation.name, implementation.devices) == (name, SPECS[name].devices)
    assert implementation.launcher == SPECS[name].launcher


def _settings(cache: Path, case: Case) -> EvaluatorSettings:
    # Quick timing, every check kept; NVRTC needs a target architecture where no GPU is seen.
    arch = "sm_90" if case.device == "cuda" and GPU_REASON else None
    return EvaluatorSettings(device=case.device, cache_dir=cache, cuda_arch=arch,
                             compile_timeout_s=600.0, run_timeout_s=60.0, seeds=1, warmup=1,
                             min_repeats=3, max_repeats=20, timing_budget_s=0.05,
                             flush_cache=False)


class Subject:
    """One language's evaluator, its starting kernel and the variants the suite builds from it;
    each variant is built once, on first use (torch-ext builds cost half a minute each)."""

    def __init__(self, name: str, cache: Path) -> None:
        case = CASES[name]
        self.settings = _settings(cache, case)
        self.evaluator = SandboxEvaluator(case.task, name, self.settings)
        self.start = start = self.evaluator.start_candidate
        knobbed = _with_probe(start, case)
        knob, values = next(iter(knobbed.space.items()))
        a, b = (knobbed.derive(knobs={knob: v}) for v in values[:2])
        self.variants = {
            "knob a": a, "knob b": b,
            # knob b's file as candidates/ and best/ hold it, built with no knobs at all
            "baked": start.derive(source=self_contained_source(b), knob_space={}),
            "broken": start.derive(source=case.broken + start.source),
            "cheat": start.derive(source=case.cheat + start.source),
        }
        self._language, self._cache = get_language(name, self.settings), CompileCache(cache)
        self._builds: dict[str, Build] = {}

    def builds(self, *labels: str) -> dict[str, Build]:
        todo = [label for label in labels if label not in self._builds]
        with ThreadPoolExecutor(max_workers=2) as pool:  # two compilers at once: CI has 2 cores
            done = pool.map(lambda label: self._cache.build(
                self._language, self.variants[label], self.settings.compile_timeout_s), todo)
            self._builds.update(zip(todo, done, strict=True))
        return {label: self._builds[label] for label in labels}


def _with_probe(start: Candidate, case: Case) -> Candidate:
    if start.space:
        return start
    assert case.probe, "a starting kernel without knobs needs a probe knob in its case"
    return start.derive(source=start.source + case.probe, knob_space={"KS_PROBE": (3, 5)})


@pytest.fixture(scope="module")
def subjects(compile_cache: Path) -> Iterator[dict[str, Subject]]:
    """One ``Subject`` per language, made on first use, shared by the module's tests."""
    made: dict[str, Subject] = {}

    class OnFirstUse(dict):
        def __missing__(self, name: str) -> Subject:
            made[name] = self[name] = Subject(name, compile_cache)
            return made[name]

    yield OnFirstUse()
    for subject in made.values():
        subject.evaluator.close()


@pytest.mark.parametrize("name", _params(builds=True))
def test_knob_values_change_the_binary(subjects, name):
    built = subjects[name].builds("knob a", "knob b")
    for label, build in built.items():
        assert build.result.ok, f"{label}: {build.result.log}"
    a, b = (build.artifact.read_bytes() for build in built.values())
    assert a != b


@pytest.mark.parametrize("name", _params(builds=True))
def test_a_file_with_its_knobs_baked_in_builds_alone(subjects, name):
    subject = subjects[name]
    baked = subject.variants["baked"]
    assert not baked.knob_values and not baked.space  # nothing is passed to the compiler
    built = subject.builds("baked", "knob b")
    assert built["baked"].result.ok, built["baked"].result.log
    if CASES[name].baked_same_binary:
        assert _machine_code(built["baked"]) == _machine_code(built["knob b"])


def _machine_code(build: Build) -> bytes:
    """The built code without what a language records beside it (a cuda artifact's header
    states the knob values it was built with, for the launcher)."""
    if build.artifact.suffix == ".kscubin":
        return read_artifact(build.artifact)[1]
    return build.artifact.read_bytes()


@pytest.mark.parametrize("name", _params())
def test_a_cheat_is_rejected_before_it_builds(subjects, name):
    evaluation = subjects[name].evaluator.evaluate(subjects[name].variants["cheat"])
    assert evaluation.status is Status.REJECTED, evaluation.message
    assert f"uses {CASES[name].cheat_rule}" in evaluation.message


@pytest.mark.parametrize("name", _params())
def test_a_compile_error_comes_back_with_the_compilers_message(subjects, name):
    evaluation = subjects[name].evaluator.evaluate(subjects[name].variants["broken"])
    assert evaluation.status is Status.COMPILE_ERROR, evaluation.message
    assert UNDECLARED in evaluation.message and "error" in evaluation.message.lower()


def _judged(subject: Subject, candidate: Candidate) -> Evaluation:
    if subject.settings.device == "cuda" and GPU_REASON:  # the gpu mark skips it first
        pytest.skip(f"needs a GPU: {GPU_REASON}")
    return subject.evaluator.evaluate(candidate)


@pytest.mark.parametrize("name", _params(runs=True))
def test_the_starting_kernel_runs_through_the_tasks_launcher_and_is_correct(subjects, name):
    subject = subjects[name]
    evaluation = _judged(subject, subject.start)
    assert evaluation.status is Status.OK, evaluation.message
    assert len(evaluation.shapes) == len(subject.evaluator.task.tuning_shapes)
    assert all(s.correct and s.time_us > 0 for s in evaluation.shapes)


def _returns_at_once(candidate: Candidate) -> str:
    """The candidate's source with its entry point returning before it writes anything."""
    entry = re.escape(candidate.entry)
    if SPECS[candidate.language].syntax is Syntax.PYTHON:
        found = re.search(rf"^def {entry}\(.*?\):[^\n]*\n", candidate.source, re.M | re.S)
        insert = "    return None\n"
    else:
        found = re.search(rf"\b{entry}\s*\([^)]*\)\s*\{{", candidate.source)
        insert = " return; "
    assert found, f"no definition of {candidate.entry} found"
    return candidate.source[:found.end()] + insert + candidate.source[found.end():]


@pytest.mark.parametrize("name", _params(runs=True, builds=True))
def test_a_kernel_that_writes_nothing_is_incorrect(subjects, name):
    subject = subjects[name]
    lazy = subject.start.derive(source=_returns_at_once(subject.start))
    evaluation = _judged(subject, lazy)
    assert evaluation.status is Status.INCORRECT, evaluation.message
