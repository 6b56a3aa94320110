"""The OS isolation holds on its own: cpp candidates that escape, judged with the static screen and
the symbol check switched off in the judge, so that only the runner's namespaces, Landlock and
seccomp filter stand between them and the machine.

Each kernel tries one escape on its first call and computes the right answer only when the escape
FAILS (it writes zeros when it succeeds): OK means the OS refused it, INCORRECT that it got out.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelswarm.evaluators import SandboxEvaluator
from kernelswarm.evaluators.languages import cpp
from kernelswarm.evaluators.sandbox.isolation import launcher
from kernelswarm.evaluators.sandbox.landlock import LandlockUnavailable, abi_version
from kernelswarm.search import Status, load_task
from tests.conftest import SILU_TASK
from tests.evaluators.kernel_library import quick_settings

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the runner's OS isolation is Linux's")

SILU = """
    for (int64_t t = 0; t < tokens; ++t)
        for (int64_t i = 0; i < d; ++i) {
            float g = x[t * 2 * d + i];
            out[t * d + i] = escaped ? 0.0f : g / (1.0f + expf(-g)) * x[t * 2 * d + d + i];
        }
"""

KERNEL = """#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <signal.h>
#include <unistd.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
static bool tried = false, escaped = false;
extern "C" void silu_and_mul(float* out, const float* x, int64_t tokens, int64_t d) {
    if (!tried) { tried = true; escaped = (%s); }
%s}
"""

ESCAPES = {
    "signal the judge": "kill(@JUDGE@, 0) == 0",
    "connect to loopback": "[]{ sockaddr_in to{}; to.sin_family = AF_INET; "
                           "to.sin_port = htons(@PORT@); to.sin_addr.s_addr = htonl(0x7f000001); "
                           "int s = socket(AF_INET, SOCK_STREAM, 0); "
                           "return s >= 0 && connect(s, (sockaddr*)&to, sizeof to) == 0; }()",
    "fork a process": "[]{ pid_t c = fork(); if (c == 0) { "
                      "execl(\"/bin/sleep\", \"sleep\", \"@MARKER@\", (char*)nullptr); _exit(0); }"
                      " return c > 0; }()",
    "write outside scratch": "[]{ FILE* f = fopen(\"@OUTSIDE@\", \"wb\"); "
                             "return f != nullptr && fputs(\"cached\", f) >= 0; }()",
    "read the judge's environment": "[]{ FILE* f = fopen(\"/proc/@JUDGE@/environ\", \"rb\"); "
                                    "return f != nullptr && fgetc(f) != EOF; }()",
}


@pytest.fixture(scope="module")
def unscreened(tmp_path_factory) -> Iterator[SandboxEvaluator]:
    """An evaluator whose judge neither screens sources nor checks imported symbols."""
    patch = pytest.MonkeyPatch()
    patch.setattr(cpp, "forbidden_imports", lambda artifact: None)
    evaluator = SandboxEvaluator(SILU_TASK, "cpp",
                                 quick_settings(tmp_path_factory.mktemp("cache")))
    patch.setattr(evaluator.language, "screen_rules", ())
    yield evaluator
    evaluator.close()
    patch.undo()


@pytest.mark.parametrize("escape", sorted(ESCAPES))
def test_the_os_refuses_what_the_screens_would_have(unscreened, escape, tmp_path):
    if escape == "read the judge's environment" and "pid" not in launcher().namespaces:
        pytest.skip(f"without a PID namespace /proc is shared: {launcher().note}")
    if escape == "write outside scratch" and "mount" not in launcher().namespaces:
        try:
            abi_version()
        except LandlockUnavailable as exc:
            pytest.skip(f"neither a mount namespace ({launcher().note}) nor Landlock ({exc})")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.2)
    marker = f"61.{uuid.uuid4().hex[:6]}"
    outside = tmp_path / "escaped.bin"
    source = KERNEL % (ESCAPES[escape], SILU)
    for key, value in (("@JUDGE@", os.getpid()), ("@PORT@", listener.getsockname()[1]),
                       ("@MARKER@", marker), ("@OUTSIDE@", outside)):
        source = source.replace(key, str(value))
    start = load_task(SILU_TASK).starting_candidate("cpp")
    try:
        evaluation = unscreened.evaluate(start.derive(source=source))
        # Right on every shape, so the escape failed (INCORRECT would mean it got out; the
        # timing phase may still refuse a run on a loaded machine, which is not this test's)
        assert evaluation.status in (Status.OK, Status.REJECTED), evaluation.message
        assert "correct" in evaluation.message or "tim" in evaluation.message
        assert evaluation.metrics["isolation_seccomp"].startswith("filter")
        with pytest.raises(TimeoutError):
            listener.accept()
        assert not outside.exists()
        time.sleep(0.2)
        assert not [p for p in Path("/proc").iterdir() if p.name.isdigit()
                    and marker.encode() in _cmdline(p)]
    finally:
        listener.close()


def _cmdline(process: Path) -> bytes:
    try:
        return (process / "cmdline").read_bytes()
    except OSError:
        return b""


TRITON_ESCAPES = '''
import torch

_ESCAPED = []


def _attempts():
    tries = {
        "fork": lambda: torch.os.fork(),
        "signal the judge": lambda: torch.os.kill(@JUDGE@, 0),
        "connect": lambda: torch.importlib.import_module("socket").create_connection(
            ("127.0.0.1", @PORT@), 1),
        "run a shell": lambda: torch.importlib.import_module("subprocess").run(["true"]),
        "write outside": lambda: torch.builtins.open("@OUTSIDE@", "w").write("cached"),
        "read the judge's environment": lambda: torch.builtins.open(
            "/proc/@JUDGE@/environ", "rb").read(1),
    }
    got = []
    for name, attempt in tries.items():
        try:
            if attempt() == 0 and name == "fork":
                torch.os._exit(0)  # the child of a fork that was let through
            got.append(name)
        except BaseException:
            pass
    return got
'''


@pytest.fixture(scope="module")
def unscreened_triton(tmp_path_factory) -> Iterator[SandboxEvaluator]:
    """A triton evaluator (interpreter, tiny shapes) whose judge does not screen sources."""
    from tests.evaluators.conftest import TINY_SHAPES

    task = tmp_path_factory.mktemp("tasks") / "silu_and_mul_tiny"
    shutil.copytree(SILU_TASK, task)
    with open(task / "task.py", "a") as module:
        module.write(TINY_SHAPES)
    evaluator = SandboxEvaluator(task, "triton", quick_settings(
        tmp_path_factory.mktemp("cache"), run_timeout_s=60.0))
    patch = pytest.MonkeyPatch()
    patch.setattr(evaluator.language, "screen_rules", ())
    yield evaluator
    evaluator.close()
    patch.undo()


def test_a_python_kernel_gets_no_further_than_a_cpp_one(unscreened_triton, tmp_path):
    """fork, signals, sockets, a shell, files outside scratch and the judge's /proc, through
    torch.os, torch.importlib and torch.builtins: the escapes the triton screen refuses."""
    if "pid" not in launcher().namespaces:
        pytest.skip(f"without a PID namespace /proc is shared: {launcher().note}")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.2)
    outside = tmp_path / "escaped.txt"
    start = load_task(unscreened_triton.task.path).starting_candidate("triton")
    entry = "def silu_and_mul(out, x, tokens, d, BLOCK=1024):\n"
    assert entry in start.source
    source = start.source.replace(entry, TRITON_ESCAPES + "\n\n" + entry
                                  + "    if not _ESCAPED:\n        _ESCAPED.append(_attempts())\n"
                                  + "    if _ESCAPED[0]:\n        return\n")
    for key, value in (("@JUDGE@", os.getpid()), ("@PORT@", listener.getsockname()[1]),
                       ("@OUTSIDE@", outside)):
        source = source.replace(key, str(value))
    try:
        evaluation = unscreened_triton.evaluate(start.derive(source=source))
        assert evaluation.status in (Status.OK, Status.REJECTED), evaluation.message
        assert "correct" in evaluation.message or "tim" in evaluation.message
        with pytest.raises(TimeoutError):
            listener.accept()
        assert not outside.exists()
    finally:
        listener.close()
