"""Every place that acts on a language fact reads it from ``search.SPECS``, for every language.

Each test below asks one of those places, for each language in ``SPECS``, the question it
answers (does the kernel compile at its first call, can a dispatch kernel be composed, what
starts a comment, which FlashInfer-Trace language, which device Inductor writes for, which
languages a command offers) and checks the answer against the spec. A table of language
names kept beside the spec gives a wrong answer here as soon as a language or a value changes.
Nothing is compiled: these run in seconds.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks import eval_cost, kernelbench
from kernelswarm.agents.builtin import dispatch_source
from kernelswarm.evaluators.inductor import inductor_start
from kernelswarm.evaluators.inductor.inductor_code import GenerationError
from kernelswarm.evaluators.languages import (
    IMPLEMENTATIONS,
    CppLanguage,
    CudaLanguage,
    KernelLanguage,
    get_language,
    implementations,
)
from kernelswarm.evaluators.runner.session import Session
from kernelswarm.evaluators.settings import EvaluatorSettings
from kernelswarm.experiments.authoring import compiled_start
from kernelswarm.experiments.commands.tasks import add_tasks_parser
from kernelswarm.experiments.flashinfer import export as flashinfer_export
from kernelswarm.search import SPECS, TaskError, UnknownLanguage, load_task
from kernelswarm.search.language_spec import Dispatch
from tests.conftest import SILU_TASK

NAMES = list(SPECS)


@pytest.fixture(scope="module")
def silu():
    return load_task(SILU_TASK, "cpu")


# -- the evaluators' registry ------------------------------------------------------------------

def test_one_implementation_per_spec_in_specs_order():
    assert list(IMPLEMENTATIONS) == NAMES
    assert all(cls.language_spec is SPECS[name] for name, cls in IMPLEMENTATIONS.items())


def test_a_spec_without_an_implementation_stops_the_registry():
    with pytest.raises(AssertionError, match="no KernelLanguage implements torch-ext, triton"):
        implementations((CppLanguage, CudaLanguage))


def test_an_implementation_without_a_spec_in_specs_stops_the_registry():
    class Rust(CppLanguage):
        language_spec = replace(SPECS["cpp"], name="rust")

    with pytest.raises(AssertionError, match="Rust: its spec 'rust' is not SPECS"):
        implementations((*IMPLEMENTATIONS.values(), Rust))
    with pytest.raises(AssertionError, match="another class implements it too"):
        implementations((*IMPLEMENTATIONS.values(), CppLanguage))


def test_an_unknown_name_lists_the_languages_of_the_spec():
    with pytest.raises(UnknownLanguage, match="'rust'; known: " + ", ".join(NAMES)):
        get_language("rust")


# -- evaluators/runner/session.py: a compiler at the first call --------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_the_sandbox_lets_a_compiler_run_where_the_spec_says_one_does(name):
    spec = SPECS[name]
    for device in spec.devices:
        session = Session(arena_fd=-1)
        session.settings = EvaluatorSettings(device=device)
        session.language = get_language(name)
        assert isinstance(session.language, KernelLanguage)
        assert session.needs_compiler == (device in spec.jit_devices), device


# -- agents/builtin/dispatch_source.py: dispatch kernels ---------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_a_dispatch_kernel_is_composed_as_the_spec_says(name, silu):
    start = silu.starting_candidate(name)
    knobs = {k: values[0] for k, values in start.space.items()}
    routes = [(dict(shape), knobs) for shape in silu.tuning_shapes[:2]]
    composed = dispatch_source.compose(start.source, name, start.entry, routes)
    dispatch = SPECS[name].dispatch
    assert (name in dispatch_source.LANGUAGES) == (dispatch is not Dispatch.NONE)
    assert (composed is None) == (dispatch is Dispatch.NONE)
    if composed is not None:  # the file's own entry point picks the route, or the launch does
        defines_entry = f'extern "C" void {start.entry}(' in composed[0]
        assert defines_entry == (dispatch is Dispatch.ENTRY_POINT)


# -- benchmarks/eval_cost.py: variants by a trailing comment -----------------------

@pytest.mark.parametrize("name", NAMES)
def test_cost_variants_differ_by_a_comment_of_the_language(name, silu):
    start = silu.starting_candidate(name)
    variants = eval_cost.variants(start, 2)
    assert variants[1].source.endswith(f"\n{SPECS[name].syntax.comment} variant 1\n")
    assert len({v.id for v in variants}) == 2


def test_triton_cost_variants_differ_inside_every_kernel(silu):
    """Triton keys its own cache by a kernel's source alone: a variant that differed only
    after it would find the first one's compiled kernels, and cost nothing to build."""
    import ast

    def kernels(source: str) -> dict[str, str]:
        return {node.name: ast.get_source_segment(source, node)
                for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)
                and any("jit" in ast.unparse(d) for d in node.decorator_list)}

    first, second = (kernels(v.source) for v in
                     eval_cost.variants(silu.starting_candidate("triton"), 2))
    assert first and set(first) == set(second)
    assert all(first[name] != second[name] for name in first)
    assert all("# variant 1" in kernel for kernel in second.values())


# -- experiments/flashinfer/export.py: FlashInfer-Trace solutions ------------------------------

@pytest.mark.parametrize("name", [n for n in NAMES if SPECS[n].claims_suffixes])
def test_a_kernel_file_is_exported_in_the_languages_the_spec_names(name):
    spec = SPECS[name]
    kernel = Path("kernel" + spec.suffix)
    if spec.flashinfer_language is None:
        with pytest.raises(TaskError, match="FlashInfer-Trace solutions are written in"):
            flashinfer_export.exported_language(kernel)
        return
    assert flashinfer_export.exported_language(kernel) is spec
    written = flashinfer_export.solution_spec(spec, "run", "CPU")
    assert written["language"] == spec.flashinfer_language
    assert written["dependencies"] == list(spec.flashinfer_dependencies)
    assert written["entry_point"] == f"kernel{spec.suffix}::run"


# -- evaluators/inductor/inductor_start.py, experiments/authoring/compiled_start.py, commands/tasks.py

@pytest.mark.parametrize("name", [*NAMES, "rust"])
def test_a_start_is_generated_on_the_device_inductor_writes_the_language_for(name):
    device = SPECS[name].inductor_device if name in SPECS else None
    if device is None:
        with pytest.raises(TaskError, match="a start is generated in"):
            compiled_start.generation_device(name)
        with pytest.raises(GenerationError, match="a start can be generated in"):
            inductor_start.inductor_device(name)
        return
    assert compiled_start.generation_device(name) == device
    assert inductor_start.inductor_device(name) == device
    assert any(h.startswith(SPECS[name].syntax.comment) for h in compiled_start._GENERATED)


def _offered(parse, name: str) -> bool:
    try:
        parse(name)
    except SystemExit:
        return False
    return True


@pytest.mark.parametrize("name", NAMES)
def test_tasks_start_offers_the_languages_inductor_writes(name, capsys):
    parser = argparse.ArgumentParser()
    add_tasks_parser(parser.add_subparsers(dest="command"))
    offered = _offered(lambda n: parser.parse_args(
        ["tasks", "start", "d", "--from-compile", "--language", n]), name)
    assert offered == (SPECS[name].inductor_device is not None)


# -- benchmarks/kernelbench.py -----------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_the_kernelbench_benchmark_offers_the_languages_its_tasks_launch(name, capsys):
    offered = _offered(lambda n: kernelbench._arguments(
        ["--kernelbench", "kb", "--starts", "starts", "--language", n]), name)
    launches = f"\ndef {SPECS[name].launcher}(" in kernelbench.TASK_PY.template
    assert offered == launches
    assert kernelbench.LANGUAGES == ("cpp", "triton")  # the template's launchers today
