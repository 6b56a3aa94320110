"""What a ``cpp`` kernel library may import: checked on the built library, before it is loaded.

The static screen reads the source; this check reads what the linker produced, the dynamic
symbols that the loader will bind (evaluators/languages/elf_symbols.py), so that a name hidden from the
screen (a weak declaration, a call through ``(fork)()``, a typedef'd pointer, a macro) is still
seen. A library that imports any symbol of ``CPP_SYMBOL_RULES`` is REJECTED with the symbol
named; one whose symbol table cannot be read is REJECTED too.

A kernel computes on memory it is given: it needs arithmetic and maths functions, ``memcpy`` and
friends, ``operator new`` and the C++ runtime, and nothing below. ``getenv`` and ``abort`` stay
allowed (the environment is scrubbed; an abort is a crash the evaluator classifies). The check
is a first filter: the runner's seccomp filter and namespaces hold even for a library that
reaches a function without importing it (an address computed from another function's).

``torch-ext`` libraries are not checked this way: a PyTorch extension imports the Python C API
by design. That language is judged by what it runs: the compute guard sees every ATen call,
and the same OS isolation applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .elf_symbols import ElfError, imported_symbols


@dataclass(frozen=True)
class SymbolRule:
    """One class of forbidden imports: exact names and name prefixes, and why."""

    name: str
    exact: frozenset[str]
    prefixes: tuple[str, ...]
    reason: str

    def matches(self, symbol: str) -> bool:
        return symbol in self.exact or symbol.startswith(self.prefixes)


def _rule(name: str, exact: str, prefixes: tuple[str, ...], reason: str) -> SymbolRule:
    return SymbolRule(name, frozenset(exact.split()), prefixes, reason)


CPP_SYMBOL_RULES = (
    _rule("the Python C API", "", ("Py", "_Py"),
          "a kernel library may not call into the Python interpreter that loads it"),
    _rule("dynamic loading", "dlopen dlmopen dlsym dlvsym dladdr dladdr1 dlinfo dl_iterate_phdr "
          "_r_debug __libc_dlopen_mode __libc_dlsym __libc_dlvsym", ("_dl_",),
          "a kernel may not load code or look up symbols at run time"),
    _rule("processes", "fork vfork _Fork clone clone3 execve execv execvp execvpe execl execlp "
          "execle execveat fexecve system popen pclose posix_spawn posix_spawnp daemon wait "
          "waitpid wait3 wait4 waitid kill killpg tgkill tkill sigqueue raise pthread_kill "
          "pthread_sigqueue ptrace process_vm_readv process_vm_writev syscall prctl setrlimit "
          "prlimit prlimit64 unshare setns mount umount umount2 chroot setuid setgid seteuid "
          "setegid setresuid setresgid", (),
          "a kernel may not start, signal or inspect processes, or change its own"),
    _rule("sockets", "socket socketpair connect bind listen accept accept4 send sendto sendmsg "
          "sendmmsg recv recvfrom recvmsg recvmmsg shutdown setsockopt getsockopt getaddrinfo "
          "getnameinfo gethostbyname gethostbyname2 gethostbyname_r gethostbyname2_r "
          "gethostbyaddr", (), "a kernel may not use the network"),
    _rule("threads", "pthread_create thrd_create", ("_ZNSt6thread", "GOMP_", "omp_", "__kmpc_"),
          "kernels run on one thread; the evaluator owns the cores and the timing"),
    _rule("files", "open open64 openat openat64 __open_2 __open64_2 __openat_2 __openat64_2 "
          "creat creat64 fopen fopen64 freopen freopen64 fdopen opendir fdopendir unlink "
          "unlinkat remove rename renameat renameat2 mkdir mkdirat rmdir truncate truncate64 "
          "ftruncate ftruncate64 symlink symlinkat link linkat chmod fchmod fchmodat chown "
          "fchown lchown fchownat mkfifo mknod mknodat mkstemp mkstemp64 mkostemp tmpfile "
          "tmpfile64 shm_open shm_unlink memfd_create",
          ("_ZNSt14basic_ofstream", "_ZNSt14basic_ifstream", "_ZNSt13basic_fstream",
           "_ZNSt13basic_filebuf", "_ZNSt12__basic_file", "_ZNSt10filesystem"),
          "a kernel may not touch files; it reads its inputs and writes its outputs only"),
    _rule("descriptors and mappings", "read write pread pread64 pwrite pwrite64 readv writev "
          "preadv pwritev __read_chk __pread_chk __pread64_chk close dup dup2 dup3 ioctl fcntl "
          "fcntl64 pipe pipe2 sendfile sendfile64 splice tee vmsplice mmap mmap64 munmap mremap "
          "mprotect pkey_mprotect madvise brk sbrk", (),
          "a kernel may not do descriptor I/O (the runner's channel is a descriptor) or change "
          "memory mappings and protections"),
    _rule("clocks", "clock_gettime gettimeofday time clock ftime times getrusage timespec_get "
          "clock_getres timer_create timer_settime setitimer getitimer alarm ualarm sleep "
          "usleep nanosleep clock_nanosleep", ("_ZNSt6chrono", "_ZNSt11this_thread"),
          "a kernel may not read clocks or sleep: it could tell when it is being timed"),
    _rule("the call stack", "backtrace backtrace_symbols backtrace_symbols_fd _Unwind_Backtrace "
          "_Unwind_GetIP _Unwind_GetIPInfo _Unwind_FindEnclosingFunction __libc_stack_end", (),
          "a kernel may not inspect who called it: it could tell checking from timing"),
    _rule("signal handlers", "signal sigaction bsd_signal sysv_signal __sysv_signal sigset "
          "sigprocmask pthread_sigmask __sigsetjmp siglongjmp sigaltstack", (),
          "a kernel may not handle signals: crashes must reach the evaluator"),
)


@dataclass(frozen=True)
class ForbiddenImport:
    """The forbidden imports of one library, grouped by rule (rules in ``CPP_SYMBOL_RULES``
    order, symbols in table order)."""

    found: tuple[tuple[SymbolRule, tuple[str, ...]], ...]

    @property
    def message(self) -> str:
        rule, symbols = self.found[0]
        if not symbols:
            return f"symbol check: {rule.reason}"
        shown = ", ".join(f"`{s}`" for s in symbols[:5])
        more = f" and {len(symbols) - 5} more" if len(symbols) > 5 else ""
        others = [r.name for r, _ in self.found[1:]]
        tail = f" (also imports {', '.join(others)})" if others else ""
        return (f"symbol check: the built library imports {shown}{more} ({rule.name}): "
                f"{rule.reason}{tail}")


def forbidden_imports(artifact: Path, rules: tuple[SymbolRule, ...] = CPP_SYMBOL_RULES
                      ) -> ForbiddenImport | None:
    """The forbidden symbols ``artifact`` imports, or None when it imports none.

    A library whose symbol table cannot be read is refused (as if it imported something), since
    nothing could be said about what it calls.
    """
    try:
        imports = imported_symbols(artifact)
    except ElfError as exc:
        unreadable = SymbolRule("an unreadable symbol table", frozenset(), (),
                                f"the library's dynamic symbols cannot be read ({exc})")
        return ForbiddenImport(((unreadable, ()),))
    found = []
    for rule in rules:
        symbols = tuple(dict.fromkeys(s for s in imports if rule.matches(s)))
        if symbols:
            found.append((rule, symbols))
    return ForbiddenImport(tuple(found)) if found else None
