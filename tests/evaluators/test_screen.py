"""The static screen of cpp sources: what it refuses, and what it must not."""

from __future__ import annotations

import pytest

from kernelswarm.evaluators.languages.cpp import CPP_SCREEN_RULES
from kernelswarm.evaluators.languages.screen import screen
from tests.evaluators.kernel_library import kernel_source


@pytest.mark.parametrize("line, rule", [
    ("std::thread t(work);", "threads"),
    ("pthread_create(&t, nullptr, work, nullptr);", "threads"),
    ("#pragma omp parallel for", "OpenMP"),
    ("if (fork() == 0) {}", "processes"),
    ('system("ls");', "processes"),
    ('FILE* p = popen("id", "r");', "processes"),
    ('execvp("sh", argv);', "processes"),
    ('FILE* f = fopen("/etc/passwd", "r");', "files"),
    ('int fd = open("/tmp/x", 0);', "files"),
    ("std::ofstream log_file;", "files"),
    ('write(4, "{}", 2);', "raw descriptors"),
    ("int s = socket(AF_INET, SOCK_STREAM, 0);", "network"),
    ('void* h = dlopen("libc.so.6", RTLD_NOW);', "dynamic loading"),
    ("clock_gettime(CLOCK_MONOTONIC, &ts);", "timers"),
    ("gettimeofday(&tv, nullptr);", "timers"),
    ("uint64_t c = __rdtsc();", "timers"),
    ("setitimer(ITIMER_REAL, &it, nullptr);", "timers"),
    ("signal(SIGSEGV, handler);", "signal handlers"),
    ("sigaction(SIGSEGV, &sa, nullptr);", "signal handlers"),
    ('asm volatile("cpuid" ::: "memory");', "inline assembly"),
    ("__attribute__((constructor)) static void early() {}", "load-time code"),
    ('#include "../../secrets.h"', "non-system includes"),
    ("#define CALL(a, b) a##b", "token pasting"),
])
def test_forbidden_constructs_are_refused_with_their_line(line, rule):
    finding = screen(f"#include <stdint.h>\n\n{line}\n", CPP_SCREEN_RULES)
    assert finding is not None and finding.rule.name == rule
    assert finding.line == 3 and f"line 3 uses {rule}" in finding.message


def test_comments_do_not_trigger_the_screen():
    source = "// we never fork() or open() files\n/* std::thread\n would be wrong */\nint x;\n"
    assert screen(source, CPP_SCREEN_RULES) is None


def test_a_name_split_over_a_line_continuation_is_still_seen():
    finding = screen("int a;\nstd::thr\\\nead t(work);\n", CPP_SCREEN_RULES)
    assert finding is not None and finding.rule.name == "threads" and finding.line == 2


@pytest.mark.parametrize("name", ["wrong_math", "ten_times_work", "reads_env", "flaky"])
def test_ordinary_kernels_pass(name):
    assert screen(kernel_source(name), CPP_SCREEN_RULES) is None


def test_vector_intrinsics_pass():
    source = "#include <immintrin.h>\n__m256 y = _mm256_loadu_ps(p); // open question: fma?\n"
    assert screen(source, CPP_SCREEN_RULES) is None


@pytest.mark.parametrize("line, rule", [
    ("pid_t child = (fork)();", "processes"),
    ("int r = (kill)(getppid(), 9);", "processes"),
    ("typedef int (*Kill)(int, int); Kill k = kill;", "processes"),
    ("Spawn spawn = fork;", "processes"),
    ("auto shell = &system;", "processes"),
    ("Shell s = (Shell)system;", "processes"),
    ('extern "C" int (socket)(int, int, int);', "network"),
    ("Connect c = connect;", "network"),
    ("Table t = {::kill};", "processes"),
    ("void* p = __libc_dlsym(h, name);", "processes"),
    ('FILE* f = (fopen)("/etc/passwd", "r");', "files"),
    ("auto w = &write;", "raw descriptors"),
    ("ssize_t (*w)(int, const void*, size_t) = write;", "raw descriptors"),
    ("void* h = (dlopen)(nullptr, 0);", "dynamic loading"),
    ("#include <link.h>", "dynamic loading"),
    ('__attribute__((weak)) int PyRun_SimpleString(const char*);', "the Python C API"),
    ("int state = PyGILState_Ensure();", "the Python C API"),
    ("#include <Python.h>", "the Python C API"),
    ('extern "C" __attribute__((weak)) int mystery(void);', "weak symbols"),
    ("#pragma weak mystery", "weak symbols"),
    ("#include <unistd.h>", "system interfaces"),
    ("#include <bits/std_thread.h>", "system interfaces"),
    ("#include <sys/syscall.h>", "system interfaces"),
    ("thread worker(compute, out, x);", "threads"),
    ("uint64_t now = __builtin_ia32_rdtsc();", "timers"),
    ("time_t now = (time)(nullptr);", "timers"),
    ("void* caller = __builtin_return_address(0);", "the call stack"),
    ("int depth = backtrace(frames, 16);", "the call stack"),
    ('__attribute__((used, section(".init_array"))) static void (*early)() = setup;',
     "load-time code"),
])
def test_names_hidden_behind_parentheses_pointers_and_headers_are_refused(line, rule):
    finding = screen(f"#include <stdint.h>\n\n{line}\n", CPP_SCREEN_RULES)
    assert finding is not None and finding.rule.name == rule, finding and finding.message
    assert finding.line == 3


def test_variables_named_like_functions_pass():
    source = ("#include <stdint.h>\n"
              'extern "C" void k(float* out, const float* x, int64_t n) {\n'
              "    bool write = n > 0; float time_scale = 2.0f; int64_t read_at = 0;\n"
              "    if (write) { out[read_at] = x[read_at] * time_scale; }\n"
              "    float signal_gain = 1.0f, clock_rate = signal_gain * 2.0f;\n"
              "    out[0] += clock_rate;\n"
              "    Reader r; r.read(out, n); r.close(); Chan* c = &chan; c->send(x[0]);\n}\n")
    assert screen(source, CPP_SCREEN_RULES) is None


def test_a_raw_string_cannot_make_code_look_like_a_comment():
    source = 'const char* s = R"(" /* )"; int p = fork(); /* */\n'
    finding = screen(source, CPP_SCREEN_RULES)
    assert finding is not None and finding.rule.name == "processes"
    delimited = 'const char* s = R"x(a)" /* )x"; int p = fork(); /* */\n'
    assert screen(delimited, CPP_SCREEN_RULES) is not None


def test_digit_separators_are_not_quotes():
    source = "int64_t n = 1'000; // it's never fork()ed here\nint64_t m = 0xFF'FF'FF;\n"
    assert screen(source, CPP_SCREEN_RULES) is None


@pytest.mark.parametrize("source", [
    "int p = fo\\  \nrk();\n",  # a backslash, spaces, then the newline: GCC splices it
    "/* a comment *\\\n/ int p = fork(); /* */\n",  # the comment ends at the spliced `*/`
    "%:include <unistd.h>\n",  # a digraph for `#`
    "%:define J(a, b) a%:%:b\n",  # a digraph for `##`
])
def test_what_the_compiler_splices_or_spells_differently_is_still_seen(source):
    assert screen(source, CPP_SCREEN_RULES) is not None
