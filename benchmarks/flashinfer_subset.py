"""The FlashInfer subset the GPU anchors use, rebuilt from PyPI: ``python -m
benchmarks.flashinfer_subset --out .gpu-anchors/fi_subset.tar.xz``

flashinfer-python 0.7.2 (a 62 MiB wheel) compiles its kernels with nvcc at their first call; a
GPU host has no registry and a call carries 64 MiB. For the anchors silu_and_mul,
fused_add_rmsnorm and merge_state (docs/baselines.md) the subset keeps the flashinfer modules
that ``import flashinfer``, those three names and their JIT specs import (in a child process),
the dist-info files ``importlib.metadata`` reads, the JIT modules ``silu_and_mul``, ``norm`` and
``cascade`` built here by FlashInfer's own JIT specs for ``--archs`` (9.0a: H100, H200) and put
where FlashInfer loads prebuilt modules from (``flashinfer/data/aot/<name>/<name>.so``), what
they compile from (the ``data/csrc`` files the builds read, ``data/include``, ``data/cccl``) for
a JIT on another GPU, and tvm-ffi (cp312, less libbacktrace's sources), which loads them.

It needs the package index, nvcc, ninja and a C++ compiler, no GPU. ``norm`` includes
``cublasLt.h`` and ``curand_kernel.h``: where the toolkit and ``--cuda-include`` lack them, they
come from the nvidia-cublas and nvidia-curand wheels (480 MB more to download). Downloads stay in
``--work``. Exit status 1, naming the step, when a step fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path

FLASHINFER = "flashinfer-python==0.7.2"
TVM_FFI = "apache-tvm-ffi==0.1.15.post2"  # in FlashInfer's range; the one run on H100 and H200
HEADER_WHEELS = ("nvidia-cublas==13.0.2.14", "nvidia-curand==10.4.0.35")  # CUDA 13.0's
NEEDED_HEADERS = ("cublasLt.h", "curand_kernel.h")
HOST_WHEEL = ("--only-binary=:all:", "--python-version=3.12", "--implementation=cp",
              *(f"--platform=manylinux_2_{v}_x86_64" for v in (28, 27, 24, 17)))
DEFAULT_CUDA_HOME = Path("/usr/local/cuda")
WHOLE_DIRS = ("flashinfer/data/include/", "flashinfer/data/cccl/")
DIST_INFO_READ = ("METADATA", "WHEEL", "top_level.txt", "entry_points.txt")
LEFT_OUT = ("tvm_ffi/3rdparty/libbacktrace/",)  # the C sources of tvm-ffi's own build

# Run with the unpacked wheels first on sys.path: FlashInfer reads its workspace, target archs
# and extra flags from the environment when it is imported.
CHILD = """
import json, sys
from importlib.metadata import requires, version
from packaging.requirements import Requirement
import flashinfer
from flashinfer import fused_add_rmsnorm, merge_state, silu_and_mul
from flashinfer.jit import activation, cascade, norm
wanted = [Requirement(r) for r in requires("flashinfer-python") if r.startswith("apache-tvm-ffi")]
if not all(r.specifier.contains(version("apache-tvm-ffi")) for r in wanted if not r.marker):
    sys.exit(f"flashinfer needs {wanted}, not apache-tvm-ffi {version('apache-tvm-ffi')}")
specs = [activation.gen_act_and_mul_module("silu"), norm.gen_norm_module(),
         cascade.gen_cascade_module()]
for spec in specs:
    spec.build(verbose=False)
modules = [{"name": s.name, "library": str(s.jit_library_path), "aot": str(s.aot_path),
            "build_dir": str(s.build_dir), "ninja": str(s.ninja_path)} for s in specs]
files = sorted({m.__file__ for m in list(sys.modules.values()) if getattr(m, "__file__", None)})
with open(sys.argv[1], "w") as out:
    json.dump({"files": files, "modules": modules}, out)
"""


class SubsetError(RuntimeError):
    """A step of the build failed; the message names the step and what to do about it."""


def _run(step: str, command: list[str], env: Mapping[str, str] | None = None) -> str:
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-25:])
        raise SubsetError(f"{step} failed (exit {done.returncode}):\n{tail}")
    return done.stdout


def find_cuda_home(env: Mapping[str, str]) -> Path:
    """The CUDA toolkit to build with: $CUDA_HOME or $CUDA_PATH, else nvcc's on PATH, else
    /usr/local/cuda; SubsetError where it has no nvcc, or ninja or the C++ compiler is missing."""
    named = [Path(env[key]) for key in ("CUDA_HOME", "CUDA_PATH") if env.get(key)]
    on_path = shutil.which("nvcc", path=env.get("PATH", ""))
    found = [*([Path(on_path).resolve().parents[1]] if on_path else []), DEFAULT_CUDA_HOME]
    homes = named[:1] or [home for home in found if (home / "include/cuda_runtime.h").is_file()]
    if not homes or not (homes[0] / "bin/nvcc").is_file():
        where = (f"no {homes[0]}/bin/nvcc" if homes
                 else f"not on PATH, no {DEFAULT_CUDA_HOME}, CUDA_HOME unset")
        raise SubsetError(f"nvcc not found ({where}): FlashInfer's modules are built with it; "
                          "install the CUDA toolkit or set CUDA_HOME to one")
    for tool in ("ninja", env.get("CXX", "c++")):
        if shutil.which(tool, path=env.get("PATH", "")) is None:
            raise SubsetError(f"{tool} not found on PATH: FlashInfer's JIT builds run it")
    return homes[0]


def pip_download(requirements: Iterable[str], dest: Path, host: bool) -> list[Path]:
    """The wheels (no dependencies) for the GPU host's Python 3.12, or for this interpreter."""
    dest.mkdir(parents=True, exist_ok=True)
    _run(f"pip download of {' '.join(requirements)} from the package index",
         [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(dest),
          *(HOST_WHEEL if host else ("--only-binary=:all:",)), *requirements])
    prefixes = [r.replace("-", "_").replace("==", "-") + "-" for r in requirements]
    wheels = [next((w for w in sorted(dest.glob("*.whl")) if w.name.startswith(prefix)), None)
              for prefix in prefixes]
    if None in wheels:
        raise SubsetError(f"pip download left no {prefixes[wheels.index(None)]}*.whl in {dest}")
    return wheels


def unpack(wheel: Path, dest: Path) -> Path:
    if not dest.is_dir():  # else unpacked by an earlier run
        part = dest.with_name(dest.name + ".part")
        shutil.rmtree(part, ignore_errors=True)
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(part)
        os.replace(part, dest)
    return dest


def _extract_headers(wheel: Path, include: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if "/include/" in member and not member.endswith("/"):
                header = include / member.split("/include/", 1)[1]
                header.parent.mkdir(parents=True, exist_ok=True)
                header.write_bytes(archive.read(member))


def cuda_includes(cuda_home: Path, given: list[Path], work: Path) -> list[Path]:
    """Folders for -isystem where norm.cu finds NEEDED_HEADERS (none if the toolkit has them)."""
    def missing(folders: list[Path]) -> list[str]:
        return [h for h in NEEDED_HEADERS if not any((f / h).is_file() for f in folders)]
    if not missing([cuda_home / "include", *given]):
        return given if missing([cuda_home / "include"]) else []
    include = work / "cuda-headers"
    if missing([include]):  # else taken from the wheels by an earlier run
        for wheel in pip_download(HEADER_WHEELS, work / "wheels-headers", True):
            _extract_headers(wheel, include)
    if missing([include]):
        raise SubsetError(f"{', '.join(missing([include]))} not in {', '.join(HEADER_WHEELS)}")
    return [*given, include]


def csrc_read(ninja_deps: str, build_dir: Path, data: Path) -> set[Path]:
    """The files under ``data/csrc`` that ``ninja -t deps`` of ``build_dir`` says it read."""
    paths = {(build_dir / line.strip()).resolve() for line in ninja_deps.splitlines()
             if line.startswith(" ") and line.strip()}
    return {path for path in paths if path.is_relative_to(data.resolve() / "csrc")}


def build(roots: list[Path], cuda_home: Path, includes: list[Path], archs: str,
          work: Path) -> dict:
    """Imports FlashInfer from the unpacked wheels ``roots`` and builds the three modules, in a
    child process: the files it imported, each module's library and AOT path, the csrc read."""
    stub = work / "libcuda-stub"  # -lcuda resolves without a driver; the modules don't call it
    stub.mkdir(parents=True, exist_ok=True)
    _run("a libcuda.so stub", [os.environ.get("CXX", "c++"), "-shared", "-x", "c", "/dev/null",
                               "-Wl,-soname,libcuda.so.1", "-o", str(stub / "libcuda.so")])
    shutil.rmtree(work / "workspace", ignore_errors=True)  # a fresh build, not a cached one
    path = [str(root) for root in roots] + [p for p in [os.environ.get("PYTHONPATH")] if p]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "PYTHONDONTWRITEBYTECODE": "1",
           "CUDA_HOME": str(cuda_home), "FLASHINFER_WORKSPACE_BASE": str(work / "workspace"),
           "FLASHINFER_CUDA_ARCH_LIST": archs, "FLASHINFER_EXTRA_LDFLAGS": f"-L{stub}",
           "FLASHINFER_EXTRA_CUDAFLAGS": " ".join(f"-isystem {p}" for p in includes)}
    print(f"building silu_and_mul, norm, cascade with {cuda_home}/bin/nvcc for {archs} ...",
          flush=True)
    _run("importing flashinfer and building silu_and_mul, norm, cascade with nvcc",
         [sys.executable, "-c", CHILD, str(work / "built.json")], env=env)
    built = json.loads((work / "built.json").read_text())
    built["csrc"] = sorted(str(p) for m in built["modules"] for p in csrc_read(
        _run(f"ninja -t deps of {m['name']}",
             ["ninja", "-C", m["build_dir"], "-f", m["ninja"], "-t", "deps"]),
        Path(m["build_dir"]), roots[0] / "flashinfer" / "data"))
    return built


def _always_kept(name: str) -> bool:
    top, _, rest = name.partition("/")
    if top.endswith(".dist-info"):
        return (top.startswith("apache_tvm_ffi-") or rest in DIST_INFO_READ
                or rest.startswith("licenses/"))
    return (name.startswith(WHOLE_DIRS) or name == "flashinfer/py.typed"
            or top == "tvm_ffi" and not name.startswith(LEFT_OUT))


def select(root: Path, imported: Iterable[str | Path], csrc: Iterable[str | Path]) -> list[str]:
    """The files, relative to ``root`` (an unpacked wheel), that the subset keeps: those of
    ``imported`` and ``csrc`` under it, ``WHOLE_DIRS``, ``py.typed``, the dist-info files
    metadata reads and the licences, all of tvm_ffi's dist-info, tvm_ffi less ``LEFT_OUT``."""
    root = root.resolve()
    named = {Path(path).resolve() for path in [*imported, *csrc]}
    kept = {path.relative_to(root).as_posix() for path in named
            if path.is_relative_to(root) and path.is_file()}
    kept |= {name for path in root.rglob("*") if path.is_file() and "__pycache__" not in path.parts
             and _always_kept(name := path.relative_to(root).as_posix())}
    return sorted(kept)


def write_tar(members: Iterable[tuple[Path, str]], out: Path) -> int:
    """Writes (file, name in it) pairs as a .tar.xz, sorted, atomically; returns its size."""
    out.parent.mkdir(parents=True, exist_ok=True)
    part, now = out.with_name(out.name + ".part"), int(time.time())
    with tarfile.open(part, "w:xz", preset=9) as tar:
        for source, name in sorted(members, key=lambda member: member[1]):
            info = tar.gettarinfo(str(source), arcname=name)
            info.uid, info.gid, info.uname, info.gname, info.mtime = 0, 0, "root", "root", now
            with open(source, "rb") as handle:
                tar.addfile(info, handle)
    os.replace(part, out)
    return out.stat().st_size


def _print_sizes(members: list[tuple[Path, str]], built: dict) -> None:
    parts: dict[str, list[int]] = {}
    for source, name in members:
        part = ("AOT modules " + ", ".join(Path(m["library"]).name for m in built["modules"])
                if "/data/aot/" in name else "JIT sources" if "/data/" in name
                else "tvm-ffi" if "tvm_ffi" in name else "flashinfer modules and dist-info")
        parts.setdefault(part, []).append(source.stat().st_size)
    for part, sizes in parts.items():
        print(f"  {part}: {len(sizes):,} files, {sum(sizes):,} B ({sum(sizes) / 2**20:.2f} MiB)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks."
                                          "flashinfer_subset", description=__doc__.split("\n\n")[1])
    parser.add_argument("--out", type=Path, default=Path(".gpu-anchors/fi_subset.tar.xz"))
    parser.add_argument("--work", type=Path, help="downloads and builds, kept for the next run",
                        default=Path(tempfile.gettempdir()) / "kernelswarm-flashinfer-subset")
    parser.add_argument("--archs", default="9.0a", help="FLASHINFER_CUDA_ARCH_LIST of the build")
    parser.add_argument("--cuda-include", type=Path, action="append", default=[],
                        help=f"a folder holding {' and '.join(NEEDED_HEADERS)}")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        cuda_home = find_cuda_home(os.environ)  # before any download
        work = args.work.resolve()
        fi_wheel, host_ffi = pip_download([FLASHINFER, TVM_FFI], work / "wheels-host", True)
        tag = f"-cp{sys.version_info[0]}{sys.version_info[1]}-"  # the child imports tvm_ffi here
        local_ffi = host_ffi if tag in host_ffi.name else pip_download(
            [TVM_FFI], work / f"wheels{tag.rstrip('-')}", False)[0]
        flashinfer = unpack(fi_wheel, work / "unpacked" / fi_wheel.stem)
        roots = [flashinfer, unpack(local_ffi, work / "unpacked" / local_ffi.stem)]
        includes = cuda_includes(cuda_home, [p.resolve() for p in args.cuda_include], work)
        built = build(roots, cuda_home, includes, args.archs, work)
        members = [(flashinfer / n, n) for n in select(flashinfer, built["files"], built["csrc"])]
        members += [(Path(m["library"]), Path(m["aot"]).resolve().relative_to(
            flashinfer.resolve()).as_posix()) for m in built["modules"]]
        ffi = unpack(host_ffi, work / "unpacked" / host_ffi.stem)
        members += [(ffi / n, n) for n in select(ffi, (), ())]
        size = write_tar(members, args.out)
    except SubsetError as error:
        print(f"flashinfer_subset: {error}", file=sys.stderr)
        return 1
    _print_sizes(members, built)
    total = sum(source.stat().st_size for source, _ in members)
    print(f"wrote {args.out}: {size:,} B ({size / 2**20:.2f} MiB), {len(members):,} files, "
          f"{total / 2**20:.1f} MiB unpacked, in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
