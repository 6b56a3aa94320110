"""The ``cpp`` language: C++ exporting an ``extern "C"`` function on raw pointers, run on the CPU.

Built by the system C++ compiler (``$CXX``, default ``g++``) with ``CPP_FLAGS``:

- ``-O3``: the optimisation level kernels are judged at;
- ``-fPIC -shared``: a shared library that the sandbox loads with ctypes;
- ``-std=c++17``: one language level for every candidate;
- ``-Wl,--no-undefined``: an undefined symbol fails the build (COMPILE_ERROR, with the name)
  instead of failing later at load time.

The built library's imports are then checked (evaluators/languages/cpp_symbols.py): one that
imports the Python C API, ``dlopen``/``dlsym``, process, socket, thread, file or clock calls is
REJECTED with the symbol named, before anything loads it.

No ``-march=native``: an artifact in a shared cache must run on every machine that reads it.
Knobs become ``-DNAME=VALUE``. The entry point's ctypes signature comes from the task's
``argtypes`` (``CTYPE_KINDS``); it returns nothing.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...search import ARGUMENT_KINDS, SPECS, Candidate
from .base import (
    BuildError,
    KernelLanguage,
    LoadedKernel,
    LoadError,
    macro_definitions,
    run_compiler,
)
from .cpp_symbols import forbidden_imports
from .elf_symbols import ElfError, dynamic_symbols
from .screen import ScreenRule

CPP_FLAGS = ("-O3", "-fPIC", "-shared", "-std=c++17", "-Wl,--no-undefined")

CTYPE_KINDS: dict[str, Any] = {
    "ptr": ctypes.c_void_p,
    "i64": ctypes.c_int64,
    "i32": ctypes.c_int32,
    "f32": ctypes.c_float,
    "f64": ctypes.c_double,
}
assert tuple(CTYPE_KINDS) == ARGUMENT_KINDS, "the spec's argument kinds and their ctypes differ"

# A name followed by a call's parenthesis, also through parentheses around the name: (fork)().
_CALL = r"\s*(?:\)\s*)*\("


def _called(names: str) -> str:
    """``names`` called, unless as a member (``x.read()``, ``p->send()``: a struct's own)."""
    return rf"(?<!\.)(?<!->)\b(?:{names})" + _CALL


def _as_value(names: str) -> str:
    """``names`` taken as a value: assigned, cast, returned, passed, or their address taken, as a
    function pointer (``F f = (F)kill;``) would be. A parenthesised condition (``if (write)``)
    is not such a use."""
    before = r"(?:[=,{?:]|\breturn\b|(?<!\bif)(?<!\bif )(?<!\bwhile)(?<!\bwhile )\()"
    return (rf"{before}\s*(?:\(\s*\w+\s*\**\s*\)\s*)?&?\s*(?:::\s*)?\b(?:{names})\s*[;,)}}]"
            rf"|&\s*(?:::\s*)?\b(?:{names})\b")


# Functions no kernel has a reason to name at all, as a call, a value or a declaration: naming
# them is refused wherever they appear, so that a typedef'd pointer or an alias does not hide one.
_PROCESS_NAMES = (r"fork|vfork|clone3|posix_spawnp?|popen|ptrace|daemon|exec(?:l|lp|le|v|vp|ve|"
                  r"vpe|veat)|fexecve|pidfd_\w+|tgkill|tkill|killpg|sigqueue|process_vm_\w+|"
                  r"syscall|prctl|setns|unshare")
_GENERIC_PROCESS_NAMES = r"clone|system|kill|wait|waitpid"

# What a CPU kernel may not use, and why. Kernels run single-threaded, side-effect free and
# untimed-by-themselves; anything that could reach outside the call or the measurement is refused.
CPP_SCREEN_RULES = (
    ScreenRule("digraphs", r"%:",
               "`%:` is `#` spelled as a digraph, which hides includes, macros and token pasting "
               "from this screen; write `#`"),
    ScreenRule("system interfaces",
               r"#\s*include\s*<\s*(?:bits|sys|linux|asm|asm-generic|x86_64-linux-gnu|"
               r"aarch64-linux-gnu|ext)/|#\s*include\s*<\s*(?:unistd|spawn|sched|fcntl|poll|"
               r"semaphore|mqueue|termios|syscall|pty|utmp|ucontext)\.h\s*>",
               "a kernel includes standard C/C++ and intrinsics headers only: these declare "
               "processes, descriptors, threads and system calls"),
    ScreenRule("threads", r"\bstd\s*::\s*(thread|jthread|async|this_thread)\b|\bpthread_\w+"
               r"|\b(?:thread|jthread)\s+\w+\s*[({]|\b(?:thread|jthread)\s*[({]|\bthrd_\w+"
               r"|#\s*include\s*<\s*(thread|pthread\.h|threads\.h|future)\s*>",
               "kernels run on one thread; the evaluator owns the cores and the timing"),
    ScreenRule("OpenMP", r"#\s*pragma\s+omp\b|\bomp_\w+" + _CALL + r"|#\s*include\s*<\s*omp\.h",
               "kernels run on one thread; OpenMP would start a thread pool"),
    ScreenRule("processes", rf"\b(?:{_PROCESS_NAMES})\b|\b__libc_\w+|"
               + _called(_GENERIC_PROCESS_NAMES) + "|" + _as_value(_GENERIC_PROCESS_NAMES),
               "a kernel may not start or signal processes (not even name the functions that do)"),
    ScreenRule("files", r"\b(?:fopen|freopen|fdopen|openat|creat|opendir|unlink|unlinkat|mkdir|"
               r"rmdir|chdir|symlink|mkstemp|tmpfile|shm_open|memfd_create)\b"
               r"|" + _called("open|remove|rename|truncate|link")
               + "|" + _as_value("open|remove|rename|truncate|link")
               + r"|\b(std\s*::\s*)?[io]?fstream\b|\bstd\s*::\s*filesystem\b"
               r"|#\s*include\s*<\s*(fstream|filesystem)\s*>",
               "a kernel may not touch files; it reads its inputs and writes its outputs only"),
    ScreenRule("raw descriptors", r"\b(?:pread|pwrite|readv|writev|preadv|pwritev|dup2|dup3|"
               r"ioctl|fcntl|pipe2|sendfile|splice|vmsplice)\b"
               r"|" + _called("read|write|dup|close|pipe")
               + "|" + _as_value("read|write|dup|close|pipe"),
               "a kernel may not do descriptor I/O (the runner's channel is a descriptor)"),
    ScreenRule("network", r"\b(?:socket|socketpair|accept4|sendto|sendmsg|sendmmsg|recvfrom|"
               r"recvmsg|recvmmsg|getaddrinfo|gethostbyname\w*|getnameinfo)\b"
               r"|" + _called("connect|bind|listen|accept|send|recv")
               + "|" + _as_value("connect|bind|listen|accept|send|recv")
               + r"|#\s*include\s*<\s*(sys/socket\.h|netinet/|arpa/inet\.h|netdb\.h)",
               "a kernel may not use the network"),
    ScreenRule("dynamic loading", r"\b(?:dlopen|dlmopen|dlsym|dlvsym|dladdr1?|dlinfo|"
               r"dl_iterate_phdr|_r_debug|link_map)\b|#\s*include\s*<\s*(?:dlfcn|link)\.h",
               "a kernel may not load code or look up symbols at run time"),
    ScreenRule("timers", r"\b(?:clock_gettime|clock_settime|clock_getres|gettimeofday|"
               r"settimeofday|setitimer|getitimer|timer_create|timer_settime|timespec_get|"
               r"nanosleep|clock_nanosleep|usleep)\b|\w*rd(?:tscp?|pmc)\w*"
               r"|__builtin_readcyclecounter|" + _called("alarm|time|clock|sleep")
               + "|" + _as_value("alarm|time|clock|sleep")
               + r"|\bstd\s*::\s*chrono\b|#\s*include\s*<\s*(chrono|sys/time\.h|ctime|time\.h)\s*>",
               "a kernel may not read or change clocks: it could tell when it is being timed"),
    ScreenRule("the call stack", r"__builtin_(?:frame|return)_address|__builtin_extract_return_addr"
               r"|\bbacktrace\w*|\b_Unwind_\w+|#\s*include\s*<\s*(?:execinfo|unwind)\.h",
               "a kernel may not inspect who called it: it could tell checking from timing"),
    ScreenRule("signal handlers", r"\b(?:sigaction|sigprocmask|sigsetjmp|siglongjmp|sigaltstack|"
               r"bsd_signal|sysv_signal)\b|" + _called("signal|raise")
               + "|" + _as_value("signal|raise")
               + r"|#\s*include\s*<\s*(csignal|signal\.h)",
               "a kernel may not handle or raise signals: crashes must reach the evaluator"),
    ScreenRule("memory mapping", r"\b(?:mmap|mmap64|munmap|mremap|mprotect|pkey_mprotect|madvise|"
               r"sbrk)\b|\bbrk" + _CALL,
               "a kernel may not change memory mappings or protections"),
    ScreenRule("inline assembly", r"\b(asm|__asm__|__asm)\b",
               "inline assembly can issue system calls or read the cycle counter unseen; "
               "use intrinsics (<immintrin.h>) instead"),
    ScreenRule("the Python C API", r"\b_?Py[A-Z_]\w*|#\s*include\s*<\s*Python\.h",
               "a kernel library may not call into the Python interpreter that loads it"),
    ScreenRule("weak symbols", r"\b(?:__)?weak(?:ref)?(?:__)?\b|#\s*pragma\s+weak\b",
               "a weak declaration binds to whatever the loading process defines (the "
               "interpreter's own functions included); use only what system headers declare"),
    ScreenRule("load-time code", r"__attribute__\s*\(\(.*\b(constructor|destructor|ifunc|section|"
               r"init_priority)\b|\[\[\s*gnu\s*::\s*(constructor|destructor|ifunc|section)\b",
               "code must run when the kernel is called, not when the library is loaded"),
    ScreenRule("non-system includes", r"#\s*include\s*\"|#\s*include\s*<\s*[/.]"
               r"|#\s*(embed|include_next|import)\b|__has_include",
               "a kernel is one file and may include only system headers as <name>"),
    ScreenRule("token pasting", r"##",
               "token pasting can assemble names that this screen cannot see"),
)

_ERROR_LINE = re.compile(r":\d+(:\d+)?: (fatal )?error:|undefined reference|error: ld returned")
_MAX_ERRORS = 3
_MAX_LOG_CHARS = 2000


def compiler() -> str:
    """The C++ compiler driver: ``$CXX`` or ``g++``."""
    return os.environ.get("CXX") or "g++"


@functools.lru_cache(maxsize=4)
def compiler_identity(driver: str) -> str:
    """The compiler's first ``--version`` line; part of every cache key."""
    try:
        out = subprocess.run([driver, "--version"], capture_output=True, text=True, timeout=30,
                             check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise RuntimeError(f"the C++ compiler {driver!r} is not usable ({exc}); install g++ "
                           f"or set CXX") from exc
    return out.splitlines()[0].strip() if out else driver


def trim_compiler_log(log: str) -> str:
    """The first errors with their source excerpts (file:line first), or the tail of the log."""
    lines = log.splitlines()
    starts = [i for i, line in enumerate(lines) if _ERROR_LINE.search(line)]
    if not starts:
        kept = lines[-20:]
    else:
        kept = []
        for i in starts[:_MAX_ERRORS]:
            kept.append(lines[i])
            kept.extend(line for line in lines[i + 1:i + 3] if line.startswith(" "))
        if len(starts) > _MAX_ERRORS:
            kept.append(f"... and {len(starts) - _MAX_ERRORS} more errors")
    text = "\n".join(kept).strip()
    return text if len(text) <= _MAX_LOG_CHARS else text[:_MAX_LOG_CHARS] + "\n... (log cut)"


def _exports(artifact: Path, symbol: str) -> bool:
    """Whether ``artifact`` defines the dynamic symbol ``symbol`` (an unreadable table: no)."""
    try:
        return any(s.defined and s.name == symbol for s in dynamic_symbols(artifact))
    except ElfError:
        return False


class CppLanguage(KernelLanguage):
    """C++ built into a shared library and called through ctypes, on the CPU."""

    language_spec = SPECS["cpp"]
    artifact_suffix = ".so"
    screen_rules = CPP_SCREEN_RULES

    def cache_key_parts(self, candidate: Candidate) -> Sequence[str]:
        return (*CPP_FLAGS, compiler_identity(compiler()))

    def build(self, candidate: Candidate, workdir: Path, artifact: Path, timeout_s: float) -> None:
        (workdir / "kernel.cpp").write_text(candidate.source)
        argv = [compiler(), *CPP_FLAGS, *macro_definitions(candidate.knob_values),
                "kernel.cpp", "-o", str(artifact)]
        status, log = run_compiler(argv, workdir, timeout_s)
        if status != 0:
            raise BuildError(trim_compiler_log(log) or f"the compiler exited with status {status}")
        if not _exports(artifact, candidate.entry):
            raise BuildError(f"the library does not export `{candidate.entry}`: declare it "
                             f"`extern \"C\"` with exactly that name (C++ mangles other names)")
        forbidden = forbidden_imports(artifact)
        if forbidden is not None:
            raise BuildError(forbidden.message, rejected=True)

    def load(self, artifact: Path, entry: str, spec: Mapping[str, Any]) -> LoadedKernel:
        try:
            library = ctypes.CDLL(str(artifact), mode=os.RTLD_NOW | os.RTLD_LOCAL)
        except OSError as exc:
            raise LoadError(f"loading the library failed: {exc}") from exc
        try:
            fn = getattr(library, entry)
        except AttributeError:
            raise LoadError(f"the library does not export `{entry}`; declare it "
                            f"`extern \"C\"`") from None
        fn.argtypes = [CTYPE_KINDS[kind] for kind in spec["argtypes"]]
        fn.restype = None
        return LoadedKernel(fn=fn, handle=library)

    def unload(self, kernel: LoadedKernel) -> None:
        import _ctypes

        _ctypes.dlclose(kernel.handle._handle)
