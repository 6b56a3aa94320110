"""The static screen of cpp sources: what it refuses, and what it must not."""

from __future__ import annotations

import pytest

from kernelswarm.evaluators.languages.cpp import CPP_SCREEN_RULES
from kernelswarm.evaluators.screen import screen
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
