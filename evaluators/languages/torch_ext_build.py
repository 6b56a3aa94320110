"""Build one torch extension without loading it: ``python torch_ext_build.py REQUEST.json``.

Run only by ``TorchExtLanguage.build``, in a child process of its own (own process group,
scrubbed environment, time limit). ``load_inline`` compiles with ninja and then imports what it
built; importing would run the candidate's static initialisers here, so the import step is
replaced by one that only returns the library's path. The request (JSON) holds: ``name`` (the
extension's module name), ``source``, ``cuda`` (compile as CUDA), ``build_directory``,
``cflags``, ``cuda_cflags`` and ``environment`` (e.g. ``TORCH_CUDA_ARCH_LIST``). Exit status 0
and the library in ``build_directory``, or 1 with the compiler's output on stdout.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

# Line numbers of errors then point into the candidate's source, not the file that
# load_inline assembles (which prepends its own #include lines).
LINE_DIRECTIVE = '#line 1 "kernel.cpp"\n'


def _library_path(name: str, path: str, is_python_module: bool) -> str:
    return os.path.join(path, f"{name}.so")


def build(request: dict[str, Any]) -> Path:
    """Compile the request's source; return the library's path (never imported)."""
    os.environ.update(request.get("environment", {}))
    # ninja from the same installation as this interpreter (pip's ninja lives beside python)
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    from torch.utils import cpp_extension

    cpp_extension._import_module_from_library = _library_path  # build, do not load
    source = LINE_DIRECTIVE + request["source"]
    cuda = bool(request["cuda"])
    result = cpp_extension.load_inline(
        name=request["name"], cpp_sources=[] if cuda else [source],
        cuda_sources=[source] if cuda else None, build_directory=request["build_directory"],
        extra_cflags=list(request["cflags"]), extra_cuda_cflags=list(request["cuda_cflags"]),
        with_cuda=cuda, verbose=False, is_python_module=True)
    if not isinstance(result, str):  # a torch that renamed the import step loaded it after all
        raise RuntimeError("load_inline imported the extension; this torch is not supported")
    return Path(result)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    request = json.loads(Path(args[0]).read_text())
    try:
        library = build(request)
    except Exception as exc:  # the compiler's output travels in the message
        print(f"{type(exc).__name__}: {exc}", flush=True)
        return 1
    if not library.is_file():
        print(f"the build produced no library at {library}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
