"""The static screen of Python kernel modules: what it refuses, and what it must not."""

from __future__ import annotations

import pytest

from kernelswarm.evaluators.languages.screen import screen
from kernelswarm.evaluators.languages.triton_screen import TRITON_SCREEN_RULES
from tests.conftest import SILU_TASK
from tests.evaluators.kernel_library import KERNELS

HEADER = "import torch\nimport triton\nimport triton.language as tl\n"


@pytest.mark.parametrize("line, rule", [
    ("import os", "imports"),
    ("import subprocess", "imports"),
    ("from threading import Thread", "imports"),
    ("import ctypes", "imports"),
    ("import time", "imports"),
    ("import concurrent.futures", "imports"),
    ("from . import helper", "imports"),
    ("from math import *", "imports"),
    ("import torch.utils.cpp_extension", "imports"),
    ("data = open('/etc/passwd').read()", "dynamic code"),
    ("eval('1 + 1')", "dynamic code"),
    ("exec('x = 1')", "dynamic code"),
    ("mul = getattr(torch, 'mul')", "dynamic code"),
    ("g = globals()", "dynamic code"),
    ("f = __builtins__", "dynamic code"),
    ("t = type('Lazy', (torch.Tensor,), {})", "dynamic code"),
    ("c = torch._C", "private names"),
    ("from torch import _C", "private names"),
    ("k = tl.core._unwrap_if_constexpr", "private names"),
    ("torch.Tensor.isnan = lambda self: self", "attribute assignment"),
    ("triton.jit = None", "attribute assignment"),
    ("del torch.mul", "attribute assignment"),
    ("out.numpy()[:] = 2.0 ** x.numpy()", "host access to tensor data"),
    ("values = x.tolist()", "host access to tensor data"),
    ("s = out.untyped_storage()", "host access to tensor data"),
    ("class Lazy(torch.Tensor):\n    pass", "classes"),
    ("t = torch", "modules as values"),
    ("def f(m=triton):\n    return m", "modules as values"),
    ("s = torch.cuda.Stream()", "streams, events and graphs"),
    ("e = torch.cuda.Event(enable_timing=True)", "streams, events and graphs"),
    ("with torch.cuda.stream(s):\n    pass", "streams, events and graphs"),
    ("g = torch.cuda.CUDAGraph()", "streams, events and graphs"),
    ("from torch.cuda import Event", "imports"),
    ("e = torch.Event()", "streams, events and graphs"),
    # every way from Python to another stream: a launch there escapes the timer
    ("s = torch.cuda.streams.Stream()", "streams, events and graphs"),
    ("s = torch.cuda.streams.ExternalStream(0)", "streams, events and graphs"),
    ("with torch.cuda.StreamContext(None):\n    pass", "streams, events and graphs"),
    ("s = torch.cuda.ExternalStream(0)", "streams, events and graphs"),
    ("torch.cuda.set_stream(None)", "streams, events and graphs"),
    ("s = torch.cuda.default_stream()", "streams, events and graphs"),
    ("s = torch.Stream()", "streams, events and graphs"),
    ("with torch.cpu.StreamContext(None):\n    pass", "streams, events and graphs"),
    ("f = torch.compile(fn)", "PyTorch escape hatches"),
    ("y = torch.ops.aten.mul(a, b)", "PyTorch escape hatches"),
    ("torch.library.define('x', 'y')", "PyTorch escape hatches"),
    ("torch.set_num_threads(8)", "global PyTorch state"),
    ("torch.backends.cuda.matmul.allow_tf32 = True", "attribute assignment"),
    ("torch.backends.cudnn.benchmark", "global PyTorch state"),
    ("torch.manual_seed(0)", "global PyTorch state"),
    ("torch.save(x, 'x.pt')", "files and processes"),
    ("from triton.runtime import driver", "imports"),
    ("d = triton.runtime.driver", "triton internals"),
    ("ms = triton.testing.do_bench(f)", "triton internals"),
    ("@triton.autotune(configs=[], key=[])\ndef f():\n    pass", "triton internals"),
    ("from triton import knobs", "triton internals"),
    ("t = tl.extra.cuda.globaltimer()", "clocks and inline assembly"),
    ("from triton.language.extra.cuda import globaltimer", "clocks and inline assembly"),
    ("y = tl.inline_asm_elementwise('mov.u64 $0, %globaltimer;', '=l', [], dtype=tl.int64, "
     "is_pure=False, pack=1)", "clocks and inline assembly"),
    ("tl.device_print('x', x)", "clocks and inline assembly"),
    ("torch.os.system('sh')", "modules reached through attributes"),
    ("p = torch.sys.modules['subprocess']", "modules reached through attributes"),
    ("torch.builtins.exec('x = 1')", "modules reached through attributes"),
    ("f = torch.builtins.getattr(torch, 'mul')", "modules reached through attributes"),
    ("m = torch.importlib.import_module('os')", "modules reached through attributes"),
    ("t = torch.threading.Thread(target=work)", "modules reached through attributes"),
    ("c = torch.ctypes.CDLL(None)", "modules reached through attributes"),
    ("y = torch.nn.functional.np.exp(a)", "modules reached through attributes"),
    ("from typing import sys", "modules reached through attributes"),
    ("from torch import os as o", "modules reached through attributes"),
    ("v = torch.cuda.os.environ", "modules reached through attributes"),
    ("torch.cuda.random.manual_seed(0)", "global PyTorch state"),
    ("caller = gen.gi_frame.f_back", "frames and code objects"),
    ("name = frame.f_code.co_name", "frames and code objects"),
    ("g = err.with_traceback(None)", "frames and code objects"),
])
def test_forbidden_constructs_are_refused_with_their_line(line, rule):
    finding = screen(f"{HEADER}\n{line}\n", TRITON_SCREEN_RULES)
    assert finding is not None, line
    assert finding.rule.name == rule and finding.line == 5, finding.message
    assert f"line 5 uses {rule}" in finding.message


def test_comments_and_strings_do_not_trigger_the_screen():
    source = (HEADER + "# import os; eval(open('x'))\n"
              "def f(out, x):\n    '''Never import threading or time.perf_counter here.'''\n"
              "    return 'torch.cuda.Stream'\n")
    assert screen(source, TRITON_SCREEN_RULES) is None


def test_a_call_split_over_lines_is_still_seen():
    source = HEADER + "s = (torch\n     .cuda\n     .Stream)()\n"
    finding = screen(source, TRITON_SCREEN_RULES)
    assert finding is not None and finding.rule.name == "streams, events and graphs"


def test_an_alias_does_not_hide_a_module():
    finding = screen("import torch as t\nt.cuda.Event()\n", TRITON_SCREEN_RULES)
    assert finding is not None and finding.rule.name == "streams, events and graphs"
    finding = screen("from torch import cuda as c\nc.Stream()\n", TRITON_SCREEN_RULES)
    assert finding is not None and finding.line == 2


def test_ordinary_triton_code_passes():
    source = HEADER + (
        "import math\nfrom triton.language.extra import libdevice\n\n"
        "@triton.jit\ndef _k(o, x, n, BLOCK: tl.constexpr):\n"
        "    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    tl.store(o + i, libdevice.exp(tl.load(x + i, mask=i < n)), mask=i < n)\n\n"
        "def entry(out, x, BLOCK=1024):\n"
        "    n = x.numel()\n    tmp = torch.empty_like(out)\n"
        "    _k[(triton.cdiv(n, BLOCK),)](tmp, x, n, BLOCK=BLOCK)\n"
        "    return math.ceil(n / BLOCK)\n")
    assert screen(source, TRITON_SCREEN_RULES) is None


@pytest.mark.parametrize("path", [
    SILU_TASK / "silu_and_mul_triton.py",
    KERNELS / "triton_computes_with_torch.py",
    KERNELS / "triton_pointer_cache.py",
    KERNELS / "triton_writes_only_first_call.py",
], ids=lambda p: p.name)
def test_kernels_the_sandbox_must_judge_pass_the_screen(path):
    assert screen(path.read_text(), TRITON_SCREEN_RULES) is None


def test_a_source_that_does_not_parse_is_left_to_the_build():
    assert screen("def f(:\n", TRITON_SCREEN_RULES) is None


def _reachable_foreign_modules(root, chain: str, seen: set[int], depth: int = 3):
    """Chains from ``root`` through modules the screen lets pass to a module outside torch and
    triton (``torch.os``, ``torch.cuda.pynvml``, ...)."""
    import inspect

    for name in dir(root):
        value = getattr(root, name, None) if not name.startswith("_") else None
        if not inspect.ismodule(value):
            continue
        dotted = f"{chain}.{name}"
        passes = screen(f"{HEADER}import typing\nx = {dotted}\n", TRITON_SCREEN_RULES) is None
        if not value.__name__.startswith(("torch", "triton")):
            if passes and name != "math":  # the standard math module, importable anyway
                yield dotted
        elif passes and depth > 0 and id(value) not in seen:
            seen.add(id(value))
            yield from _reachable_foreign_modules(value, dotted, seen, depth - 1)


def test_no_foreign_module_is_reachable_through_what_the_screen_allows():
    """Whatever this torch and triton re-export as attributes (torch.os, torch.sys, ...), three
    modules deep."""
    import typing

    import torch
    import torch.nn.functional  # noqa: F401 - holds numpy as `np`
    import triton
    import triton.language as tl

    assert screen(f"{HEADER}x = torch.os\n", TRITON_SCREEN_RULES) is not None
    seen: set[int] = set()
    slipped = [chain for root, name in ((torch, "torch"), (triton, "triton"), (tl, "tl"),
                                        (typing, "typing"))
               for chain in _reachable_foreign_modules(root, name, seen)]
    assert slipped == []


def test_tensor_operations_named_like_standard_modules_pass():
    source = HEADER + ("def entry(out, x):\n    a = torch.select(x, 0, 0)\n"
                       "    b = torch.trace(x) + torch.chunk(x, 2)[0].sum()\n"
                       "    return tl.math, a, b\n")
    assert screen(source, TRITON_SCREEN_RULES) is None
