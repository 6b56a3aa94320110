"""LanguageSpec: the one description of each kernel language, and the lookups everything uses."""

from __future__ import annotations

from dataclasses import MISSING, fields

import pytest

from kernelswarm.search import (
    LANGUAGES,
    SPECS,
    KnobStyle,
    LanguageSpec,
    Syntax,
    UnknownLanguage,
    language_spec,
    source_suffix,
    spec_for_suffix,
)
from kernelswarm.search.language_spec import Dispatch


def test_the_five_languages_and_their_launchers():
    assert LANGUAGES == ("cpp", "cuda", "torch-ext", "triton", "cute")
    assert [SPECS[n].launcher for n in LANGUAGES] == [
        "launch_cpp", "launch_cuda", "launch_torch_ext", "launch_triton", "launch_cute"]


@pytest.mark.parametrize("file, language", [
    ("k.cpp", "cpp"), ("k.CC", "cpp"), ("k.cxx", "cpp"), ("k.cu", "cuda"), ("k.py", "triton")])
def test_a_files_suffix_names_its_language(file, language):
    assert spec_for_suffix("." + file.rsplit(".", 1)[1]).name == language


def test_a_cpp_file_is_cpp_unless_told_otherwise():
    # torch-ext sources are .cpp files too; the suffix alone never picks torch-ext.
    assert SPECS["torch-ext"].suffix == ".cpp" and spec_for_suffix(".cpp").name == "cpp"


def test_a_cu_file_is_cuda_unless_told_otherwise():
    # cute sources are .cu files too; the suffix alone never picks cute.
    assert SPECS["cute"].suffix == ".cu" and spec_for_suffix(".cu").name == "cuda"


def test_unknown_names_and_suffixes_list_the_known_ones():
    with pytest.raises(UnknownLanguage, match="'rust'; known: cpp, cuda, torch-ext, triton, cute"):
        language_spec("rust")
    with pytest.raises(UnknownLanguage, match=r"'\.rs' files; known: \.cpp -> cpp"):
        spec_for_suffix(".rs")
    assert source_suffix("rust") == ".txt" and source_suffix("cuda") == ".cu"


def test_every_suffix_and_fence_tag_is_lower_case_and_the_canonical_one_first():
    for spec in SPECS.values():
        assert spec.suffixes and all(s.startswith(".") and s == s.lower() for s in spec.suffixes)
        assert spec.fence_tags and all(t == t.lower() for t in spec.fence_tags)
        assert spec.devices and set(spec.devices) <= {"cpu", "cuda"}
        assert spec.syntax.comment == ("#" if spec.syntax is Syntax.PYTHON else "//")


def test_knobs_are_macros_except_for_triton():
    assert {n for n, s in SPECS.items() if s.knobs is KnobStyle.KEYWORDS} == {"triton"}


def test_runs_on_reads_the_device_kind():
    assert SPECS["cuda"].runs_on("cuda:1") and not SPECS["cuda"].runs_on("cpu")
    assert SPECS["cpp"].runs_on("cpu") and not SPECS["cpp"].runs_on("cuda")


@pytest.mark.parametrize("entry, message", [
    ({}, r"KERNELS\['cpp'\] needs 'argtypes'.*got None"),
    ({"argtypes": []}, r"needs 'argtypes'"),
    ({"argtypes": ["ptr", "pointer"]}, r"unknown kinds \['pointer'\]; allowed: ptr, i64"),
])
def test_the_cpp_entry_needs_its_argument_kinds(entry, message):
    with pytest.raises(ValueError, match=message):
        SPECS["cpp"].check_kernel_entry(entry)


def test_other_conventions_need_nothing_from_the_entry():
    SPECS["cpp"].check_kernel_entry({"argtypes": ["ptr", "i64", "f32"]})
    for name in ("cuda", "torch-ext", "triton"):
        SPECS[name].check_kernel_entry({})


def test_each_fact_but_two_must_be_stated_for_a_new_language():
    # A field added with a default would let a new language miss it silently.
    optional = {f.name for f in fields(LanguageSpec) if f.default is not MISSING}
    assert optional == {"claims_suffixes", "compile_timeout_s"}
    stated = {f.name: getattr(SPECS["cpp"], f.name) for f in fields(LanguageSpec)
              if f.name not in optional}
    for name in stated:
        with pytest.raises(TypeError, match=name):
            LanguageSpec(**{k: v for k, v in stated.items() if k != name})


@pytest.mark.parametrize("name", LANGUAGES)
def test_the_facts_of_each_language_agree_with_each_other(name):
    spec = SPECS[name]
    assert set(spec.jit_devices) <= set(spec.devices)
    assert spec.inductor_device is None or spec.inductor_device in spec.devices
    # a dispatch kernel is copies of one source under other macro values, in C or C++
    if spec.dispatch is not Dispatch.NONE:
        assert spec.knobs is KnobStyle.MACROS and spec.syntax is Syntax.CPP
    assert spec.flashinfer_language is not None or not spec.flashinfer_dependencies


def test_the_facts_each_language_states_today():
    facts = {n: (s.jit_devices, s.dispatch, s.inductor_device, s.flashinfer_language)
             for n, s in SPECS.items()}
    assert facts == {"cpp": ((), Dispatch.ENTRY_POINT, "cpu", "cpp"),
                     "cuda": ((), Dispatch.LAUNCH, None, None),
                     "torch-ext": ((), Dispatch.NONE, None, None),
                     "triton": (("cuda",), Dispatch.NONE, "cuda", "triton"),
                     "cute": ((), Dispatch.LAUNCH, None, None)}
    assert SPECS["triton"].compiles_at_first_call("cuda:1")
    assert not SPECS["triton"].compiles_at_first_call("cpu")
