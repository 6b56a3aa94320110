"""The symbol check of cpp libraries: real libraries built with the cpp flags, read as the loader
reads them, each forbidden class REJECTED with its symbol named, the suite's kernels accepted."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kernelswarm.evaluators.languages.base import BuildError
from kernelswarm.evaluators.languages.compile_cache import CompileCache
from kernelswarm.evaluators.languages.cpp import CPP_FLAGS, CppLanguage, compiler
from kernelswarm.evaluators.languages.cpp_symbols import forbidden_imports
from kernelswarm.evaluators.languages.elf_symbols import ElfError, dynamic_symbols, imported_symbols
from kernelswarm.search import Status
from kernelswarm.search.candidate import Candidate

REPOSITORY = Path(__file__).resolve().parents[2]
TASK_KERNELS = sorted(p for p in (REPOSITORY / "experiments" / "tasks").glob("*/*.cpp")
                      if not p.name.endswith("_ext.cpp"))
LEGIT_TEST_KERNELS = ("wrong_math", "reads_env", "pointer_cache", "flaky", "ten_times_work")

pytestmark = pytest.mark.skipif(shutil.which(compiler()) is None,
                                reason=f"no C++ compiler ({compiler()}) to build libraries with")

ENTRY = 'extern "C" void kernel(float* out, long n) {{ for (long i = 0; i < n; ++i) out[i] = 0; ' \
        'if (n < 0) {{ {call}; }} }}'


def build(tmp_path: Path, source: str, name: str = "kernel") -> Path:
    (tmp_path / f"{name}.cpp").write_text(source)
    artifact = tmp_path / f"{name}.so"
    subprocess.run([compiler(), *CPP_FLAGS, f"{name}.cpp", "-o", artifact.name], cwd=tmp_path,
                   check=True, capture_output=True, timeout=120)
    return artifact


# (declarations, the call in the kernel, the symbol the check must name, its class)
FORBIDDEN = {
    "python": ('extern "C" __attribute__((weak)) int PyRun_SimpleString(const char*);',
               'PyRun_SimpleString("x")', "PyRun_SimpleString", "the Python C API"),
    "dlsym": ('extern "C" __attribute__((weak)) void* dlsym(void*, const char*);',
              'dlsym(nullptr, "x")', "dlsym", "dynamic loading"),
    "fork": ('#include <unistd.h>', "fork()", "fork", "processes"),
    "execve": ('#include <unistd.h>', "execve(nullptr, nullptr, nullptr)", "execve",
               "processes"),
    "system": ('#include <stdlib.h>', 'system("sh")', "system", "processes"),
    "kill": ('#include <signal.h>', "kill(1, 9)", "kill", "processes"),
    "syscall": ('#include <unistd.h>', "syscall(39)", "syscall", "processes"),
    "socket": ('#include <sys/socket.h>', "socket(2, 1, 0)", "socket", "sockets"),
    "connect": ('#include <sys/socket.h>', "connect(3, nullptr, 0)", "connect", "sockets"),
    "thread": ('#include <thread>', "std::thread([] {}).detach()", "_ZNSt6thread", "threads"),
    "pthread": ('#include <pthread.h>', "pthread_create(nullptr, nullptr, nullptr, nullptr)",
                "pthread_create", "threads"),
    "fopen": ('#include <stdio.h>', 'fopen("/tmp/x", "w")', "fopen", "files"),
    "write": ('#include <unistd.h>', 'write(4, "{}", 2)', "write", "descriptors and mappings"),
    "mprotect": ('#include <sys/mman.h>', "mprotect(nullptr, 0, 7)", "mprotect",
                 "descriptors and mappings"),
    "clock": ('#include <time.h>', "timespec t; clock_gettime(1, &t)", "clock_gettime",
              "clocks"),
    "chrono": ('#include <chrono>', "(void)std::chrono::steady_clock::now()", "_ZNSt6chrono",
               "clocks"),
    "sigaction": ('#include <signal.h>', "sigaction(11, nullptr, nullptr)", "sigaction",
                  "signal handlers"),
    "backtrace": ('#include <execinfo.h>', "void* f[4]; backtrace(f, 4)", "backtrace",
                  "the call stack"),
}


@pytest.mark.parametrize("case", sorted(FORBIDDEN))
def test_a_library_importing_a_forbidden_symbol_is_refused_with_its_name(tmp_path, case):
    declarations, call, symbol, rule = FORBIDDEN[case]
    artifact = build(tmp_path, declarations + "\n" + ENTRY.format(call=call))
    found = forbidden_imports(artifact)
    assert found is not None
    first_rule, symbols = found.found[0]
    assert first_rule.name == rule
    assert any(s.startswith(symbol) for s in symbols)
    assert f"`{symbol}" in found.message and rule in found.message


@pytest.mark.parametrize("path", TASK_KERNELS, ids=lambda p: p.name)
def test_the_suite_starting_kernels_pass(tmp_path, path):
    assert forbidden_imports(build(tmp_path, path.read_text(), path.stem)) is None


@pytest.mark.parametrize("name", LEGIT_TEST_KERNELS)
def test_ordinary_kernels_pass(tmp_path, name):
    source = (Path(__file__).parent / "kernels" / f"{name}.cpp").read_text()
    assert forbidden_imports(build(tmp_path, source, name)) is None


def test_the_table_agrees_with_nm(tmp_path):
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("binutils nm is not installed")
    artifact = build(tmp_path, "#include <stdlib.h>\n" + ENTRY.format(call='system("x")'))
    listed = subprocess.run([nm, "-D", str(artifact)], capture_output=True, text=True,
                            check=True).stdout.splitlines()
    undefined = {line.split()[-1].split("@")[0] for line in listed
                 if line.split()[0] in ("U", "w", "v")}
    defined = {line.split()[-1].split("@")[0] for line in listed
               if line.split()[0] not in ("U", "w", "v")}
    symbols = dynamic_symbols(artifact)
    assert set(imported_symbols(artifact)) == undefined
    assert {s.name for s in symbols if s.defined} == defined
    assert "kernel" in defined and "system" in undefined


def test_what_is_not_a_readable_library_is_refused(tmp_path):
    text = tmp_path / "kernel.so"
    text.write_text("not a library")
    found = forbidden_imports(text)
    assert found is not None and "cannot be read" in found.message
    artifact = build(tmp_path, ENTRY.format(call="(void)0"), "whole")
    truncated = tmp_path / "truncated.so"
    truncated.write_bytes(artifact.read_bytes()[:200])
    with pytest.raises(ElfError):
        dynamic_symbols(truncated)


def _candidate(source: str) -> Candidate:
    return Candidate.create(language="cpp", source=source, entry="kernel",
                            spec={"argtypes": ["ptr", "i64"]})


def test_the_cpp_build_rejects_before_anything_loads(tmp_path):
    candidate = _candidate('extern "C" __attribute__((weak)) int PyGILState_Ensure(void);\n'
                           + ENTRY.format(call="PyGILState_Ensure()"))
    with pytest.raises(BuildError) as raised:
        CppLanguage().build(candidate, tmp_path, tmp_path / "kernel.so", timeout_s=120)
    assert raised.value.rejected and "`PyGILState_Ensure`" in raised.value.log


def test_a_rejected_build_stays_rejected_in_the_cache(tmp_path):
    candidate = _candidate("#include <unistd.h>\n" + ENTRY.format(call="fork()"))
    cache = CompileCache(tmp_path / "cache")
    first = cache.build(CppLanguage(), candidate, timeout_s=120).result
    again = cache.build(CppLanguage(), candidate, timeout_s=120).result
    for result in (first, again):
        assert not result.ok and result.rejected and "`fork`" in result.log
        assert result.as_evaluation().status is Status.REJECTED
    assert again.cached and not first.cached
